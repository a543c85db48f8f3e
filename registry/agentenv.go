package registry

// AgentEnv are the variables every command started for an agent (MCP's
// terminal, ACP's terminals) gets unless the call sets them: nobody is
// there to page through output or to answer a prompt the tool could have
// skipped, so each one below switches a pager or an interactive prompt
// off, as its tool documents, and nothing else about the tool's work.
// A command that still asks is found by the input watcher
// (Info.WaitingInput).
//
// npm_config_yes=false makes npx fail at once where it would ask "Ok to
// proceed?" to install a missing package (npm's --no): the agent sees why
// and can run it again with --yes. Nothing answers a prompt with yes.
var AgentEnv = []string{
	"PAGER=cat",                      // less, man, psql and many more
	"GIT_PAGER=cat",                  // git
	"GH_PAGER=cat",                   // GitHub's gh
	"MANPAGER=cat",                   // man
	"SYSTEMD_PAGER=cat",              // systemctl, journalctl
	"AWS_PAGER=",                     // AWS CLI v2: empty turns its pager off
	"GIT_TERMINAL_PROMPT=0",          // git: fail instead of asking for credentials
	"GCM_INTERACTIVE=never",          // Git Credential Manager: no interactive sign-in
	"GH_PROMPT_DISABLED=1",           // gh: no interactive prompts
	"PIP_NO_INPUT=1",                 // pip: never ask (--no-input)
	"DEBIAN_FRONTEND=noninteractive", // apt and debconf: take the defaults
	"npm_config_yes=false",           // npx: fail instead of asking to install
	"PYTHONUNBUFFERED=1",             // Python's output as it comes, not at exit
}
