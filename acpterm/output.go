package acpterm

import (
	"github.com/corralhq/corral/internal/utf8cut"
	"github.com/corralhq/corral/registry"
)

// tailOutput is what terminal/output returns of a Poll from byte since:
// the end of the output, at most limit bytes (limit < 0: no limit),
// starting on a UTF-8 character boundary, and whether anything before it
// was left out.
//
// The registry's buffer is a head and a rolling tail with a gap between
// them once the output outgrows it; only what follows the gap is a
// contiguous end of the output, so that is all that can be returned. While
// the command runs, an incomplete character at the very end is held back:
// its remaining bytes have not arrived yet, and the next call returns it
// whole.
func tailOutput(res registry.PollResult, since int64, limit int, final bool) ([]byte, bool) {
	out := res.Output
	truncated := since > 0
	if res.OmittedBytes > 0 {
		out = out[res.OmittedAt:]
		truncated = true
	}
	if !final {
		out = out[:len(out)-utf8cut.IncompleteSuffix(out)]
	}
	cut := 0
	if limit >= 0 && len(out) > limit {
		cut = len(out) - limit
		truncated = true
	}
	if truncated {
		// What precedes the cut tells the rest of a character from
		// bytes that are not UTF-8; before a gap or the cursor it is gone.
		out = out[utf8cut.Start(out, cut):]
	}
	return out, truncated
}
