package nohup

import (
	_ "embed"
	"strconv"
	"strings"

	"github.com/corralhq/corral/internal/shellquote"
)

// The engine's shell lives in sh/*.sh, so that it can be linted (make
// shell-check) and read as shell; this file only assembles it. Every script
// is constant. Values reach it only through the positional parameters set
// by a leading `set --` line whose words are all produced by
// shellquote.Quote (see script and call), so no value is ever parsed as
// shell code. The scripts use only POSIX sh plus setsid, env, sleep,
// mkfifo, tail, head, wc, grep -z and find, and run unchanged under dash,
// bash and busybox ash.
//
// The files explain themselves in comments, which stripComments removes
// before a script is sent: a resident shell reads its library a byte per
// system call, and the parent's script is in the argv of every wrapped
// process.

var (
	//go:embed sh/proc.sh
	procSh string // pstat, wstatus: the library's and the parent's
	//go:embed sh/state.sh
	stateSh string // state, report, tree
	//go:embed sh/launch.sh
	launchSh string // corral_launch
	//go:embed sh/spares.sh
	sparesSh string // corral_arm and the removal of spares
	//go:embed sh/oom.sh
	oomSh string // oommark, oomfile: the record of OOM kills
	//go:embed sh/poll.sh
	pollSh string // corral_poll, corral_wait, corral_signal, ...
	//go:embed sh/parent.sh
	parentSh string // the parent and its wrapper and command subshells
	//go:embed sh/command.sh
	commandSh string // an armed spare's command
	//go:embed sh/write.sh
	writeSh string // Write's script
	//go:embed sh/put.sh
	putSh string // the script that brings a long command in
	//go:embed sh/pty.sh
	ptySh string // corral_ptyprobe, corral_resize
	//go:embed sh/ports.sh
	portsSh string // corral_listeners, corral_waitport, corral_checkurl
	//go:embed sh/stats.sh
	statsSh string // corral_treestats
	//go:embed sh/input.sh
	inputSh string // corral_inputwaits
	//go:embed sh/tagged.sh
	taggedSh string // corral_tagged
	//go:embed sh/cgroup.sh
	cgroupSh string // corral_cgprobe, cgmake: per-process limits
	//go:embed sh/cgjoin.sh
	cgjoinSh string // cgjoin, cgdrop: the library's, the parent's and the command's
	//go:embed sh/ptycmd.sh
	ptyCmdSh string // a terminal's command: execs script
	//go:embed sh/ptyterm.sh
	ptyTermSh string // run by script on the terminal
	//go:embed sh/pty.py
	ptyPy string // python3's stand-in for script
)

// parentBody is the parent's script (see sh/parent.sh); lib carries it in
// corral_parent.
var parentBody = assembleParent(stripComments)

// writeBody is Write's script, sent without lib, as is putBody, the
// script that brings a command too long for argv into the sandbox.
var (
	writeBody = stripComments(writeSh)
	putBody   = stripComments(putSh)
)

// lib is every function the engine calls, plus the parent's script in
// corral_parent. A call is one line naming a function with quoted
// arguments (see call); a LibTransport loads lib once per shell it keeps,
// other transports get lib and call in one script.
var lib = assembleLib(stripComments)

// assembleParent returns the parent's script with each file passed through
// prep: the /proc and cgroup primitives it shares with lib, the armed
// command in C (which joins the limit cgroups itself), then the parent.
func assembleParent(prep func(string) string) string {
	return prep(procSh) + prep(cgjoinSh) + "C=" + shellquote.Quote(prep(cgjoinSh)+prep(commandSh)) + "\n" + prep(parentSh)
}

// assembleLib returns lib with each file passed through prep. The order of
// the files does not matter to the shell (a function is looked up when it
// is called); it is the order of the functions before they moved to files.
func assembleLib(prep func(string) string) string {
	return prep(procSh) + prep(stateSh) + prep(launchSh) + prep(oomSh) + prep(sparesSh) + prep(pollSh) + prep(ptySh) + prep(portsSh) + prep(statsSh) + prep(inputSh) + prep(taggedSh) + prep(cgroupSh) + prep(cgjoinSh) +
		"corral_parent=" + shellquote.Quote(assembleParent(prep)) + "\n"
}

// stripComments returns script without its comment-only lines (the first
// non-blank character is #, which also takes the shellcheck directives and
// a shebang) and blank lines. It does not parse shell: a multi-line quoted
// string with a line starting with # would lose that line, so the scripts
// have none (TestStripKeepsEveryCommand checks it). Comments after code on
// the same line are kept.
func stripComments(script string) string {
	var b strings.Builder
	b.Grow(len(script))
	for line := range strings.SplitAfterSeq(script, "\n") {
		t := strings.TrimLeft(line, " \t")
		if t == "" || t == "\n" || t[0] == '#' {
			continue
		}
		b.WriteString(line)
	}
	return b.String()
}

// script returns body preceded by `set -- args...`, every arg single-quoted.
func script(body string, args ...string) string {
	var b strings.Builder
	b.WriteString("set --")
	for _, a := range args {
		b.WriteByte(' ')
		b.WriteString(shellquote.Quote(a))
	}
	b.WriteString("\n")
	b.WriteString(body)
	return b.String()
}

// call returns the line that runs fn with args, every arg single-quoted.
func call(fn string, args ...string) string {
	var b strings.Builder
	b.WriteString(fn)
	for _, a := range args {
		b.WriteByte(' ')
		b.WriteString(shellquote.Quote(a))
	}
	b.WriteString("\n")
	return b.String()
}

func itoa(n int) string { return strconv.Itoa(n) }

// specFile is the sh snippet the command's shell sources: it sets cmd and
// the positional parameters (KEY=VALUE words for env(1)). Every value is
// quoted; names were checked by env.Spec.Validate. Its first line starts
// with stag, si and tag, in that order, which is how corral_tagged
// (sh/tagged.sh) finds a process by its Spec.Tag without parsing sh.
func specFile(command, dir, si, tag, specTag string, environ []string) string {
	var b strings.Builder
	b.WriteString("stag=")
	b.WriteString(shellquote.Quote(specTag))
	b.WriteString(" si=")
	b.WriteString(shellquote.Quote(si))
	b.WriteString(" tag=")
	b.WriteString(shellquote.Quote(tag))
	b.WriteString(" wd=")
	b.WriteString(shellquote.Quote(dir))
	b.WriteString("\ncmd=")
	b.WriteString(shellquote.Quote(command))
	b.WriteString("\nset --")
	for _, kv := range environ {
		b.WriteByte(' ')
		b.WriteString(shellquote.Quote(kv))
	}
	b.WriteString("\n")
	return b.String()
}
