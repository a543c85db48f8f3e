package procnet

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"
)

// The sock_diag protocol (linux/inet_diag.h), encoded by hand: x/sys/unix
// has its constants but not its structs.
const (
	nlmsgHdrLen    = 16 // struct nlmsghdr
	diagReqLen     = 56 // struct inet_diag_req_v2
	diagMsgLen     = 72 // struct inet_diag_msg
	tcpListen      = 10 // TCP_LISTEN
	diagRecvBuffer = 32 << 10
)

// diagListening returns the LISTEN sockets of the caller's network
// namespace through a NETLINK_SOCK_DIAG dump, IPv4 then IPv6.
//
// It is what Listening uses for its own namespace: asked for LISTEN
// sockets only, the kernel walks just its listening hash, while reading
// /proc/net/tcp walks every bucket of the established hash too (262144 of
// them on a machine with a few GiB of memory). Measured on a loaded 2-core
// VM: 0.4 ms for both families here, 9.5 ms for both text tables.
func diagListening() ([]Socket, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return nil, fmt.Errorf("sock_diag socket: %w", err)
	}
	defer unix.Close(fd)
	buf := make([]byte, diagRecvBuffer)
	var out []Socket
	for seq, family := range []uint8{unix.AF_INET, unix.AF_INET6} {
		socks, err := diagDump(fd, uint32(seq+1), family, buf)
		if err != nil {
			return nil, err
		}
		out = append(out, socks...)
	}
	return out, nil
}

func diagDump(fd int, seq uint32, family uint8, buf []byte) ([]Socket, error) {
	var req [nlmsgHdrLen + diagReqLen]byte
	ne := binary.NativeEndian
	ne.PutUint32(req[0:], uint32(len(req)))
	ne.PutUint16(req[4:], unix.SOCK_DIAG_BY_FAMILY)
	ne.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	ne.PutUint32(req[8:], seq)
	req[16] = family
	req[17] = unix.IPPROTO_TCP
	ne.PutUint32(req[20:], 1<<tcpListen) // idiag_states
	if err := unix.Sendto(fd, req[:], 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("sock_diag request: %w", err)
	}
	var out []Socket
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("sock_diag receive: %w", err)
		}
		for b := buf[:n]; len(b) >= nlmsgHdrLen; {
			msgLen := int(ne.Uint32(b[0:]))
			if msgLen < nlmsgHdrLen || msgLen > len(b) {
				return nil, fmt.Errorf("sock_diag: message of %d bytes in %d", msgLen, len(b))
			}
			msg := b[nlmsgHdrLen:msgLen]
			switch typ := ne.Uint16(b[4:]); {
			case ne.Uint32(b[8:]) != seq:
				// A reply to an earlier request: not ours to read.
			case typ == unix.NLMSG_DONE:
				return out, nil
			case typ == unix.NLMSG_ERROR:
				if len(msg) >= 4 {
					if errno := int32(ne.Uint32(msg)); errno < 0 {
						return nil, fmt.Errorf("sock_diag: %w", unix.Errno(-errno))
					}
				}
				return nil, fmt.Errorf("sock_diag: error message of %d bytes", len(msg))
			case typ == unix.SOCK_DIAG_BY_FAMILY && len(msg) >= diagMsgLen:
				if s, ok := parseDiagMsg(msg); ok {
					out = append(out, s)
				}
			}
			b = b[min(len(b), (msgLen+3)&^3):] // NLMSG_ALIGN
		}
	}
}

// parseDiagMsg decodes a struct inet_diag_msg: family, state, timer,
// retrans, then inet_diag_sockid (ports and addresses in network order),
// expires, rqueue, wqueue, uid, inode.
func parseDiagMsg(m []byte) (Socket, bool) {
	if m[1] != tcpListen {
		return Socket{}, false
	}
	port := int(binary.BigEndian.Uint16(m[4:]))
	src := m[8:24]
	inode := uint64(binary.NativeEndian.Uint32(m[68:]))
	var addr netip.Addr
	switch m[0] {
	case unix.AF_INET:
		addr = netip.AddrFrom4([4]byte(src[:4]))
	case unix.AF_INET6:
		addr = netip.AddrFrom16([16]byte(src))
	default:
		return Socket{}, false
	}
	return Socket{Port: port, Addr: addr, Inode: inode}, true
}
