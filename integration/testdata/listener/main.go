// Command listener is the server of BenchmarkReadyLatency and
// BenchmarkIdleReadyWatch: after a random 50-150 ms (a server's start-up;
// -startup moves the 50 ms)
// it listens on 127.0.0.1:PORT, prints "listening NANOS" where NANOS is the
// wall clock (Unix nanoseconds) read right after net.Listen returned, and
// accepts and closes connections until it is killed. With -never it never
// listens (a server stuck starting up).
//
// Built with CGO_ENABLED=0, it is a static binary that runs in the
// busybox test image too.
package main

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"time"
)

func main() {
	never := flag.Bool("never", false, "never listen; sleep until killed")
	startup := flag.Duration("startup", 50*time.Millisecond, "the least start-up time; a random 0-100 ms is added")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: listener [-never] [-startup D] PORT")
		os.Exit(2)
	}
	port, err := strconv.Atoi(flag.Arg(0))
	if err != nil || port < 1 || port > 65535 {
		fmt.Fprintf(os.Stderr, "listener: bad port %q\n", flag.Arg(0))
		os.Exit(2)
	}
	if *never {
		// Not select{}: with nothing else to wait for, the runtime would
		// call that a deadlock and exit.
		for {
			time.Sleep(time.Hour)
		}
	}
	time.Sleep(*startup + rand.N(100*time.Millisecond))
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	at := time.Now().UnixNano()
	if err != nil {
		fmt.Fprintln(os.Stderr, "listener:", err)
		os.Exit(1)
	}
	fmt.Printf("listening %d\n", at)
	for {
		c, err := l.Accept()
		if err != nil {
			fmt.Fprintln(os.Stderr, "listener:", err)
			os.Exit(1)
		}
		c.Close()
	}
}
