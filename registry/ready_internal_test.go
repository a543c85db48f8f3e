package registry

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestReadyPollInterval(t *testing.T) {
	ms := time.Millisecond
	// Cheap looks: a fiftieth of the age, within [20 ms, 1 s].
	assert.Equal(t, 20*ms, readyPollInterval(0, 0))
	assert.Equal(t, 20*ms, readyPollInterval(500*ms, ms))
	assert.Equal(t, 100*ms, readyPollInterval(5*time.Second, ms))
	assert.Equal(t, time.Second, readyPollInterval(10*time.Minute, ms))
	// A dear look is spaced at four times its cost, past the 1 s bound too.
	assert.Equal(t, 520*ms, readyPollInterval(0, 130*ms))
	assert.Equal(t, 1600*ms, readyPollInterval(time.Hour, 400*ms))
}
