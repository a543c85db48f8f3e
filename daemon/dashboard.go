package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/corralhq/corral/dashboard"
	"github.com/corralhq/corral/registry"
)

// DashboardRequest is the body of POST /v1/dashboard.
type DashboardRequest struct {
	// Addr is the loopback address to serve on ("127.0.0.1:8765"); empty
	// means 127.0.0.1 and a free port. Ignored when the dashboard runs.
	Addr string `json:"addr,omitempty"`
}

// DashboardInfo says where the dashboard is served.
type DashboardInfo struct {
	// URL opens the dashboard: it carries the daemon's token once (the
	// page trades it for a cookie).
	URL string `json:"url"`
	// Addr is the address it listens on.
	Addr string `json:"addr"`
}

// dashboardHost serves the dashboard on a loopback listener, started on
// the first request (or at start with Config.HTTPAddr) and kept until the
// daemon stops. The token lives as long as the daemon.
type dashboardHost struct {
	reg   *registry.Registry
	log   *slog.Logger
	grace time.Duration
	token string

	mu   sync.Mutex
	srv  *dashboard.Server
	hs   *http.Server
	info DashboardInfo
	done chan struct{} // closed when hs.Serve returned
}

func newDashboardHost(reg *registry.Registry, log *slog.Logger, grace time.Duration) (*dashboardHost, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("daemon: dashboard token: %w", err)
	}
	return &dashboardHost{reg: reg, log: log, grace: grace, token: hex.EncodeToString(b)}, nil
}

// loopbackAddr checks that addr listens on a loopback address only: the
// dashboard can kill every process of the user, so it is never exposed
// beyond this machine (a tunnel is the user's own choice).
func loopbackAddr(addr string) (string, error) {
	if addr == "" {
		return "127.0.0.1:0", nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("%w: dashboard address %q: want HOST:PORT such as 127.0.0.1:8765", registry.ErrInvalidOptions, addr)
	}
	if host == "localhost" {
		host = "127.0.0.1"
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return "", fmt.Errorf("%w: dashboard address %q: only loopback addresses (127.0.0.1, ::1) are allowed", registry.ErrInvalidOptions, addr)
	}
	return net.JoinHostPort(ip.String(), port), nil
}

// start serves the dashboard on addr unless it already runs, and says
// where.
func (d *dashboardHost) start(addr string) (DashboardInfo, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.hs != nil {
		return d.info, nil
	}
	addr, err := loopbackAddr(addr)
	if err != nil {
		return DashboardInfo{}, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return DashboardInfo{}, fmt.Errorf("daemon: dashboard: listen on %s: %w", addr, err)
	}
	srv, err := dashboard.New(dashboard.Config{Service: d.reg, Live: d.reg, Token: d.token, KillGrace: d.grace, Logger: d.log})
	if err != nil {
		ln.Close()
		return DashboardInfo{}, err
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(d.log.Handler(), slog.LevelDebug)}
	d.srv, d.hs, d.done = srv, hs, make(chan struct{})
	base := "http://" + ln.Addr().String() + "/"
	d.info = DashboardInfo{URL: base + "?token=" + d.token, Addr: ln.Addr().String()}
	go func() {
		defer close(d.done)
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			d.log.Error("dashboard stopped serving", "err", err)
		}
	}()
	d.log.Info("dashboard serving", "url", base)
	return d.info, nil
}

// running returns where the dashboard is served, if it is.
func (d *dashboardHost) running() (DashboardInfo, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.info, d.hs != nil
}

func (d *dashboardHost) close() {
	d.mu.Lock()
	srv, hs, done := d.srv, d.hs, d.done
	d.srv, d.hs = nil, nil
	d.mu.Unlock()
	if hs == nil {
		return
	}
	srv.Close() // ends the WebSockets, so Shutdown does not wait for them
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	if err := hs.Shutdown(ctx); err != nil {
		hs.Close()
	}
	<-done
}
