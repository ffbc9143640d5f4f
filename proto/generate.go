// Package proto holds Tollgate's API definition (tollgate/v1/*.proto) and
// the Go code generated from it, in package tollgatev1.
//
// Regenerate the Go code after editing a .proto file with:
//
//	go generate ./proto
//
// It lints the API with buf's STANDARD rules, then runs buf generate with the
// local protoc-gen-go and protoc-gen-go-grpc plugins at the versions pinned in
// buf.gen.yaml. Everything is fetched from the Go module proxy; no protoc and
// no network plugin is needed.
//
// proto/google/api/field_behavior.proto declares the google.api.field_behavior
// option the API's fields are annotated with, so that buf compiles offline; it
// is neither linted nor generated (its Go code is the published package
// google.golang.org/genproto/googleapis/api/annotations).
//
// Last, it writes package apierr's list of error reasons (the Reason
// constants and Err* values that the engine, the server and the client
// share) from the ErrorReason enum.
package proto

//go:generate sh -c "cd .. && go run github.com/bufbuild/buf/cmd/buf@v1.75.0 lint && go run github.com/bufbuild/buf/cmd/buf@v1.75.0 generate"
//go:generate go run ./internal/genreasons
