package plugins

import "google.golang.org/grpc"

// WithDialOptions returns opts with extra gRPC dial options, for tests that
// watch or alter the calls the host makes.
func WithDialOptions(opts Options, dial ...grpc.DialOption) Options {
	opts.dialOptions = append(opts.dialOptions, dial...)
	return opts
}

// ProcessRunning is the host's /proc check of a plugin process.
var ProcessRunning = processRunning
