//go:build !windows

package docs_test

// provideShell: /bin/sh runs the example's command here.
func provideShell() (cleanup func(), err error) { return func() {}, nil }
