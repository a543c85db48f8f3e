// Package bench holds benchmarks that measure corral end to end against a
// plain os/exec baseline. It has no API; run `make bench` for the table
// (see internal/benchtab), or `go test -run '^$' -bench . ./bench`.
//
// Benchmarks come in pairs named Benchmark<Name>/corral and
// Benchmark<Name>/baseline so the table can set them side by side.
package bench
