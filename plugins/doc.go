// Package plugins is corral's side of backend plugins: it finds
// corral-backend-NAME binaries (Discover, Find), checks that nobody else
// could have replaced them, starts them through hashicorp/go-plugin and
// serves their Environment as an env.Environment (Open), restarting a
// plugin that died and re-attaching its detached processes. Probe asks a
// plugin for its Info, the stated capabilities included, without opening
// a target.
//
// Plugin processes start in WorkDir ("/"), with only PATH, HOME and
// Options.Env in their environment. To write a plugin, see package
// plugins/sdk and docs/plugins.md, the author's guide.
package plugins
