package local

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/corralhq/corral/env"
)

// The test binary, started with helperEnvVar set, acts as a throwaway
// supervisor: it starts one detached process, prints its Ref as JSON on
// stdout and then waits to be killed.
const (
	helperEnvVar      = "CORRAL_LOCAL_TEST_HELPER" // state directory
	helperCmdEnvVar   = "CORRAL_LOCAL_TEST_HELPER_CMD"
	helperNoCgroupVar = "CORRAL_LOCAL_TEST_HELPER_NOCGROUP"
	helperStdinEnvVar = "CORRAL_LOCAL_TEST_HELPER_STDIN"
)

func helperMain() int {
	e, err := New(Options{StateDir: os.Getenv(helperEnvVar), DisableCgroup: os.Getenv(helperNoCgroupVar) != ""})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	p, err := e.Start(context.Background(), env.Spec{
		Command: os.Getenv(helperCmdEnvVar),
		Stdin:   os.Getenv(helperStdinEnvVar) != "",
		Detach:  true,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ref, err := p.Ref()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := json.NewEncoder(os.Stdout).Encode(ref); err != nil {
		return 1
	}
	// The test SIGKILLs this process; the hour only bounds a forgotten one.
	time.Sleep(time.Hour)
	return 0
}
