// Package procnet finds listening TCP sockets and the processes that hold
// them on Linux: the socket tables of a network namespace (sock_diag
// netlink, or /proc/PID/net/tcp and tcp6), the sockets a process holds (its
// /proc/PID/fd links "socket:[INODE]"), and a process's command line. It
// is env/local's view of ports; corral's one parser of those tables.
//
//   - [ParseListening] reads the LISTEN rows of a table's text; [Listening]
//     reads both tables of the namespace a process is in.
//   - [SocketInodes] maps the socket inodes of a set of processes to one
//     holder each; [AllSocketInodes] does so for every process it may read.
//   - [NetNS] names the network namespace of a process, so that a caller
//     with processes in several namespaces reads each namespace's tables
//     once.
//   - [Command] returns a process's command line for display.
//
// Decisions:
//   - The caller's own namespace is asked over NETLINK_SOCK_DIAG for LISTEN
//     sockets only, which spares the kernel the walk over every bucket of
//     its established-connection hash that reading /proc/net/tcp costs
//     (about 20 times slower; see diagListening). The text tables remain
//     for other namespaces and kernels without sock_diag.
//   - /proc/net/tcp lists the sockets of the reader's network namespace,
//     not of the whole machine; /proc/PID/net/tcp those of PID's. Socket
//     inodes are unique machine-wide, so matching a process's fd links
//     against a namespace's table never confuses namespaces: a socket of
//     another namespace simply matches no row.
//   - Addresses are printed by the kernel as the 32-bit words of the
//     address in memory (network order) formatted as native integers, so
//     they are decoded with the machine's byte order, never a fixed one.
//   - A socket held by several processes (inherited over fork, as
//     pre-forking servers do) has one holder: the lowest PID, which is
//     usually the parent that opened it, and is the same on every look.
//   - Processes that vanish or whose fds cannot be read (another user's,
//     without privilege) are skipped, not errors: the caller reports such
//     sockets without a holder.
//   - The readers need Linux; elsewhere they return an error matching
//     errors.ErrUnsupported. The parser is portable.
package procnet

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"net/netip"
	"strconv"
)

// Socket is a TCP socket in the LISTEN state.
type Socket struct {
	// Port is the local port.
	Port int
	// Addr is the local address: 0.0.0.0, 127.0.0.1, ::, ::1, …
	Addr netip.Addr
	// Inode is the socket's inode number, as /proc/PID/fd links name it.
	Inode uint64
}

// stateListen is TCP_LISTEN in the kernel's st column.
const stateListen = "0A"

// ParseListening returns the LISTEN rows of the text of /proc/net/tcp or
// /proc/net/tcp6 (both have the same columns), in table order. A row of
// another state is skipped without being decoded; a LISTEN row that does
// not decode is an error naming its line.
func ParseListening(r io.Reader) ([]Socket, error) {
	var out []Socket
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 512), 64<<10)
	line := 0
	for sc.Scan() {
		line++
		if line == 1 {
			continue // the header: "sl local_address rem_address st ..."
		}
		// sl local rem st tx:rx tr:when retrnsmt uid timeout inode ...
		var fields [10][]byte
		n := 0
		for rest := sc.Bytes(); n < len(fields); n++ {
			rest = bytes.TrimLeft(rest, " ")
			if len(rest) == 0 {
				break
			}
			end := bytes.IndexByte(rest, ' ')
			if end < 0 {
				end = len(rest)
			}
			fields[n], rest = rest[:end], rest[end:]
		}
		if n == 0 {
			continue
		}
		if n < len(fields) {
			return nil, fmt.Errorf("procnet: line %d: %d columns, want at least %d", line, n, len(fields))
		}
		if string(fields[3]) != stateListen {
			continue
		}
		s, err := parseRow(fields[1], fields[9])
		if err != nil {
			return nil, fmt.Errorf("procnet: line %d: %w", line, err)
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("procnet: %w", err)
	}
	return out, nil
}

func parseRow(local, inode []byte) (Socket, error) {
	hexAddr, hexPort, ok := bytes.Cut(local, []byte{':'})
	if !ok {
		return Socket{}, fmt.Errorf("local address %q has no port", local)
	}
	addr, err := decodeAddr(hexAddr)
	if err != nil {
		return Socket{}, err
	}
	port, err := strconv.ParseUint(string(hexPort), 16, 16)
	if err != nil {
		return Socket{}, fmt.Errorf("port %q: %w", hexPort, err)
	}
	ino, err := strconv.ParseUint(string(inode), 10, 64)
	if err != nil {
		return Socket{}, fmt.Errorf("inode %q: %w", inode, err)
	}
	return Socket{Port: int(port), Addr: addr, Inode: ino}, nil
}

// decodeAddr decodes 8 (IPv4) or 32 (IPv6) hex digits: 32-bit words of
// the address bytes, each printed as a native-endian integer.
func decodeAddr(h []byte) (netip.Addr, error) {
	if len(h) != 8 && len(h) != 32 {
		return netip.Addr{}, fmt.Errorf("address %q: %d hex digits, want 8 or 32", h, len(h))
	}
	var raw [16]byte
	if _, err := hex.Decode(raw[:len(h)/2], h); err != nil {
		return netip.Addr{}, fmt.Errorf("address %q: %w", h, err)
	}
	var b [16]byte
	for i := 0; i < len(h)/2; i += 4 {
		binary.NativeEndian.PutUint32(b[i:], binary.BigEndian.Uint32(raw[i:]))
	}
	if len(h) == 8 {
		return netip.AddrFrom4([4]byte(b[:4])), nil
	}
	return netip.AddrFrom16(b), nil
}

// parseSocketLink returns the inode of an fd link "socket:[INODE]".
func parseSocketLink(link string) (uint64, bool) {
	const prefix, suffix = "socket:[", "]"
	if len(link) < len(prefix)+len(suffix)+1 || link[:len(prefix)] != prefix || link[len(link)-1] != ']' {
		return 0, false
	}
	ino, err := strconv.ParseUint(link[len(prefix):len(link)-1], 10, 64)
	return ino, err == nil
}
