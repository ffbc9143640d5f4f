package limiter

import (
	"fmt"

	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// errorf returns an *apierr.Error like kind with a formatted message.
func errorf(kind *apierr.Error, format string, args ...any) *apierr.Error {
	return &apierr.Error{Code: kind.Code, Reason: kind.Reason, Message: fmt.Sprintf(format, args...)}
}
