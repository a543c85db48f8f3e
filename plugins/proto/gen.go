// Package proto is the gRPC protocol between corral and backend plugins:
// backend.proto and the code protoc generates from it (committed).
//
// Regenerate with `go generate ./plugins/proto` (needs protoc on PATH; the
// Go generators are pinned as go.mod tool dependencies).
package proto

//go:generate sh -c "protoc --plugin=protoc-gen-go=\"$(go tool -n protoc-gen-go)\" --plugin=protoc-gen-go-grpc=\"$(go tool -n protoc-gen-go-grpc)\" --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative backend.proto"
