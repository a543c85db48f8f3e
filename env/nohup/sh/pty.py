# The terminal of a process where the sandbox has python3 but no util-linux
# script (see pty.sh and ptycmd.sh): run as python3 -I -c THIS, it does
# what script does. It forks a child on a new pseudo-terminal (its own
# session, the terminal its controlling terminal and its stdin, stdout and
# stderr), which runs $CORRAL_PTY_SH -c $CORRAL_PTY_TERM (ptyterm.sh);
# copies stdin (the FIFO) into the terminal, typing the terminal's EOF
# character at its end when the terminal is in canonical mode; copies the
# terminal's output to stdout (the log); and, when the child has ended and
# its output is drained, ends as the child did: with its exit code, or
# killed by the same signal, so the wrapper reads the child's own wait
# status. Python ignores SIGPIPE and SIGXFSZ and handles SIGINT: the child
# gets every disposition back at its default before it execs, and this
# process lets INT kill it.
import errno
import os
import pty
import select
import signal
import termios

for s in (signal.SIGINT, signal.SIGPIPE, signal.SIGXFSZ):
    signal.signal(s, signal.SIG_DFL)
# SIGCHLD wakes the select below through this pipe (the pipe's ends are
# not inherited, and the handler is reset by exec in the child).
rp, wp = os.pipe()
os.set_blocking(rp, False)
os.set_blocking(wp, False)
signal.set_wakeup_fd(wp)
signal.signal(signal.SIGCHLD, lambda *_: None)
sh = os.environ["CORRAL_PTY_SH"]
pid, fd = pty.fork()
if pid == 0:
    try:
        os.execv(sh, [sh, "-c", os.environ["CORRAL_PTY_TERM"]])
    finally:
        os._exit(127)


def put(f, b):
    while b:
        try:
            b = b[os.write(f, b):]
        except OSError as e:
            if e.errno != errno.EINTR:
                return False
    return True


def drain():
    # What the terminal holds now; a grandchild that keeps it open is not
    # waited for.
    os.set_blocking(fd, False)
    while True:
        try:
            b = os.read(fd, 65536)
        except OSError:
            return
        if not b or not put(1, b):
            return


inp, status = 0, None
while status is None:
    try:
        r, _, _ = select.select([fd, rp] + ([inp] if inp is not None else []), [], [])
    except InterruptedError:
        r = []
    if rp in r:
        try:
            os.read(rp, 4096)
        except OSError:
            pass
    if fd in r:
        try:
            b = os.read(fd, 65536)
        except OSError:
            b = b""
        if b:
            put(1, b)
        else:
            # Nothing holds the terminal any more: the child has ended.
            _, status = os.waitpid(pid, 0)
            break
    if inp is not None and inp in r:
        b = os.read(inp, 65536)
        if b:
            put(fd, b)
        else:
            inp = None
            a = termios.tcgetattr(fd)
            if a[3] & termios.ICANON:
                put(fd, a[6][termios.VEOF])
    w, st = os.waitpid(pid, os.WNOHANG)
    if w == pid:
        status = st
        drain()
if os.WIFSIGNALED(status):
    sig = os.WTERMSIG(status)
    signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), sig)
os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)
