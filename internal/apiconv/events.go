package apiconv

import (
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tollgate/tollgate/internal/events"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// EventToProto converts an event for the wire.
func EventToProto(ev events.Event) *tollgatev1.PoolEvent {
	return &tollgatev1.PoolEvent{
		Seq:         ev.Seq,
		Time:        timestamppb.New(ev.Time),
		Type:        ev.Type,
		Pool:        ev.Pool,
		Detail:      ev.Detail,
		LeaseId:     ev.LeaseID,
		ClientId:    ev.ClientID,
		Description: ev.Description,
		Actor:       ev.Actor,
		ProviderId:  ev.ProviderID,
		ResourceIds: ev.ResourceIDs,
	}
}
