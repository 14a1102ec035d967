package redislock

import (
	"context"
	"embed"
	"slices"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts, lua/*.lua, each with a header giving KEYS, ARGV and
// replies; sent by SHA1 (EVALSHA), and as EVAL after NOSCRIPT (evalAgain):
// no loading step.
//
//go:embed lua/*.lua
var luaFiles embed.FS

// lua returns the named scripts' sources, joined: prelude.lua (the server's
// clock, the fence step, the queue join, the read of a lock key),
// lease.lua (a holder's lease in a set of holders) and handover.lua are
// functions that other scripts start with, prelude.lua first; state.lua,
// after prelude.lua, defines functions and also runs the reads of a
// name's state (into info and value, or replies their error) for the
// scripts that follow it (inspect.lua, break.lua, break_holder.lua).
// extend.lua starts with none: the most frequent script, it runs alone
// (the tests know it by its own SHA1).
func lua(names ...string) string {
	var src []byte
	for _, name := range names {
		b, err := luaFiles.ReadFile("lua/" + name + ".lua")
		if err != nil {
			panic("redislock: " + err.Error()) // embedded at build time: cannot happen
		}
		src = append(src, b...)
	}
	return string(src)
}

// asFunction returns the named script as a Lua function of its KEYS and
// ARGV, for a script that runs it with keys and arguments of its own
// (break_holder.lua runs the release scripts so).
func asFunction(function, name string) string {
	return "local function " + function + "(KEYS, ARGV)\n" + lua(name) + "\nend\n"
}

// scriptSources maps each script's SHA1 to its source, for runScripts.
var scriptSources = map[string]string{}

// script is lua(names...) as a go-redis Script, its source noted for runScripts.
func script(names ...string) *redis.Script {
	source := lua(names...)
	s := redis.NewScript(source)
	scriptSources[s.Hash()] = source
	return s
}

var (
	acquireScript       = script("prelude", "acquire")
	releaseScript       = script("prelude", "handover", "release")
	extendScript        = script("extend")
	pttlScript          = script("prelude", "pttl")
	inspectScript       = script("prelude", "state", "inspect")
	breakScript         = script("prelude", "state", "handover", "break")
	semLeaseScript      = script("prelude", "lease", "semaphore_lease") // extend and pttl: see lease.lua
	sharedLeaseScript   = script("prelude", "lease", "shared_lease")    // likewise
	sharedReleaseScript = script("prelude", "handover", "shared_release")

	// The SHA1s of the prepared commands' scripts, boxed once (see lockRef).
	acquireSHA       any = acquireScript.Hash()
	releaseSHA       any = releaseScript.Hash()
	sharedAcquireSHA any = script("prelude", "handover", "shared_acquire").Hash()
	sharedReleaseSHA any = sharedReleaseScript.Hash()
	semAcquireSHA    any = script("prelude", "semaphore_acquire").Hash()
	semReleaseSHA    any = script("prelude", "handover", "semaphore_release").Hash()
	multiAcquireSHA  any = script("prelude", "multi_acquire").Hash()
	multiExtendSHA   any = script("prelude", "multi_extend").Hash()
	multiReleaseSHA  any = script("multi_release").Hash()
	multiPTTLSHA     any = script("prelude", "multi_pttl").Hash()
)

// scriptCmd is a command of a script of ours: "evalsha" (or "eval"), the
// SHA1 (or the source), the number of keys, the keys, the arguments.
func scriptCmd(ctx context.Context, args []any) *redis.Cmd {
	cmd := redis.NewCmd(ctx, args...)
	cmd.SetFirstKeyPos(3)
	return cmd
}

// scriptArgs is script's EVALSHA on keys with args, for scriptCmd.
func scriptArgs(script *redis.Script, keys []string, args ...any) []any {
	cmd := append(make([]any, 0, 3+len(keys)+len(args)), "evalsha", script.Hash(), len(keys))
	for _, key := range keys {
		cmd = append(cmd, key)
	}
	return append(cmd, args...)
}

// evalAgain is the one place that handles a script missing from the
// server's cache (NOSCRIPT: after SCRIPT FLUSH, a restart, a failover to a
// replica that never ran it): every command of ours that names a script by
// its SHA1 goes through it, alone (singleStore.run) or with others
// (runScripts). For cmd, a scriptCmd sent, it returns the command to send
// again: EVAL with the script's source (which also caches it), when cmd
// failed with NOSCRIPT and so ran nothing; otherwise nil.
func evalAgain(ctx context.Context, cmd *redis.Cmd) *redis.Cmd {
	if cmd == nil || !scriptMissing(cmd.Err()) {
		return nil
	}
	args := slices.Clone(cmd.Args())
	sha, _ := args[1].(string)
	source, ours := scriptSources[sha]
	if !ours {
		return nil // already an EVAL, or not ours: its error stands
	}
	args[0], args[1] = "eval", source
	return scriptCmd(ctx, args)
}

// runScripts has send send cmds (scriptCmds; nil ones are skipped) in one
// go: in a pipeline, in a pipeline with WAIT, alone; then those evalAgain
// gives, with send again, and puts them in their places in cmds.
func runScripts(ctx context.Context, cmds []*redis.Cmd, send func(cmds []*redis.Cmd)) {
	send(cmds)
	var again []*redis.Cmd
	var at []int
	for i, cmd := range cmds {
		if eval := evalAgain(ctx, cmd); eval != nil {
			again, at = append(again, eval), append(at, i)
		}
	}
	if len(again) > 0 {
		send(again)
		for j, i := range at {
			cmds[i] = again[j]
		}
	}
}

// scriptMissing tells NOSCRIPT; checks err != nil first, as isTryAgain.
func scriptMissing(err error) bool { return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") }

// Replies of the extend and release scripts.
const (
	replyDone    = 1
	replyGone    = 0
	replyForeign = -1
)

// reasonFor maps a "not ours" script reply to a loss reason.
func reasonFor(reply int64) LostReason {
	if reply == replyGone {
		return Expired
	}
	return Taken
}
