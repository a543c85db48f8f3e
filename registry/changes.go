package registry

import "sync"

// changeSignal wakes everyone waiting for the next change of something: a
// channel closed at each change and replaced. Unlike events it carries
// nothing and never drops: a waiter that was busy sees the channel closed
// and looks at the current state. The registry has one for the state of
// the tracked processes (Changed); each output buffer has one for its
// bytes (Follow).
type changeSignal struct {
	mu sync.Mutex
	ch chan struct{}
}

func (c *changeSignal) next() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ch == nil {
		c.ch = make(chan struct{})
	}
	return c.ch
}

func (c *changeSignal) notify() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ch != nil {
		close(c.ch)
		c.ch = nil
	}
}

// Changed returns a channel closed at the next change of any tracked
// process's state (a start, an exit, a kill, a removal, a prune — what a
// checkpoint records; output alone is no change). Take the channel, then
// read the state (List), then wait on it: no change is missed. A front end
// that shows the list live (the dashboard) waits on it instead of polling.
func (r *Registry) Changed() <-chan struct{} { return r.changes.next() }
