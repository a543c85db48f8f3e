package backoff_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/corralhq/corral/internal/backoff"
)

const ms = time.Millisecond

func TestNext(t *testing.T) {
	tests := []struct {
		name string
		b    backoff.Backoff
		want []time.Duration
	}{
		{"doubling to a cap", backoff.Backoff{Min: 10 * ms, Max: 50 * ms, Factor: 2},
			[]time.Duration{10 * ms, 20 * ms, 40 * ms, 50 * ms, 50 * ms}},
		{"cap reached exactly", backoff.Backoff{Min: 2 * ms, Max: 256 * ms, Factor: 2},
			[]time.Duration{2 * ms, 4 * ms, 8 * ms, 16 * ms, 32 * ms, 64 * ms, 128 * ms, 256 * ms, 256 * ms}},
		{"fractional factor", backoff.Backoff{Min: 100 * ms, Max: time.Second, Factor: 1.5},
			[]time.Duration{100 * ms, 150 * ms, 225 * ms, 337500 * time.Microsecond}},
		{"min equals max", backoff.Backoff{Min: 5 * ms, Max: 5 * ms, Factor: 2},
			[]time.Duration{5 * ms, 5 * ms, 5 * ms}},
		{"retry pacing", backoff.Backoff{Min: 50 * ms, Max: 2 * time.Second, Factor: 2},
			[]time.Duration{50 * ms, 100 * ms, 200 * ms, 400 * ms, 800 * ms, 1600 * ms, 2 * time.Second, 2 * time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []time.Duration
			for range tt.want {
				got = append(got, tt.b.Next())
			}
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestReset(t *testing.T) {
	b := backoff.Backoff{Min: 10 * ms, Max: time.Second, Factor: 2}
	b.Next()
	b.Next()
	assert.Equal(t, 40*ms, b.Next())
	b.Reset()
	assert.Equal(t, 10*ms, b.Next(), "after Reset the first wait is Min")
	assert.Equal(t, 20*ms, b.Next(), "and it grows again from there")
	b.Reset()
	b.Reset()
	assert.Equal(t, 10*ms, b.Next(), "Reset twice is Reset once")
}

func TestSleep(t *testing.T) {
	closed := make(chan struct{})
	close(closed)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()

	tests := []struct {
		name string
		ctx  context.Context
		d    time.Duration
		stop <-chan struct{}
		want error
	}{
		{"time passes", context.Background(), ms, nil, nil},
		{"time passes with an open stop", context.Background(), ms, make(chan struct{}), nil},
		{"context ended", cancelled, time.Hour, nil, context.Canceled},
		{"stop closed", context.Background(), time.Hour, closed, os.ErrClosed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			err := backoff.Sleep(tt.ctx, tt.d, tt.stop)
			assert.ErrorIs(t, err, tt.want)
			if tt.want == nil {
				assert.NoError(t, err)
				assert.GreaterOrEqual(t, time.Since(start), tt.d)
			} else {
				assert.Less(t, time.Since(start), time.Minute, "an early end does not wait d")
			}
		})
	}
}

func TestSleepDeadline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*ms)
	defer cancel()
	assert.ErrorIs(t, backoff.Sleep(ctx, time.Hour, nil), context.DeadlineExceeded)
}
