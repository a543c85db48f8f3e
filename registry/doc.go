// Package registry is corral's backend-neutral process registry: it starts
// processes in env.Environment values, tracks their state and output, ends
// their trees, and publishes events. (Full documentation follows with the
// implementation.)
package registry
