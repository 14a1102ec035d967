package redislock

import (
	"embed"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts, lua/*.lua, each with a header giving KEYS, ARGV and
// replies; EVALSHA falls back to EVAL after NOSCRIPT: no loading step.
//
//go:embed lua/*.lua
var luaFiles embed.FS

// lua returns the named scripts' sources, joined: handover.lua and
// state.lua are functions that other scripts start with.
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

var (
	acquireSource       = lua("acquire")
	releaseSource       = lua("handover", "release")
	sharedAcquireSource = lua("shared_acquire")
	sharedReleaseSource = lua("handover", "shared_release")
	semAcquireSource    = lua("semaphore_acquire")
	semReleaseSource    = lua("handover", "semaphore_release")
	multiAcquireSource  = lua("multi_acquire")
	multiExtendSource   = lua("multi_extend")
	multiReleaseSource  = lua("multi_release")
	multiPTTLSource     = lua("multi_pttl")

	acquireScript       = redis.NewScript(acquireSource)
	releaseScript       = redis.NewScript(releaseSource)
	extendScript        = redis.NewScript(lua("extend"))
	pttlScript          = redis.NewScript(lua("pttl"))
	inspectSource       = lua("state", "inspect")
	inspectScript       = redis.NewScript(inspectSource)
	breakScript         = redis.NewScript(lua("state", "handover", "break"))
	semExtendScript     = redis.NewScript(lua("semaphore_extend"))
	semPTTLScript       = redis.NewScript(lua("semaphore_pttl"))
	sharedExtendScript  = redis.NewScript(lua("shared_extend"))
	sharedPTTLScript    = redis.NewScript(lua("shared_pttl"))
	sharedReleaseScript = redis.NewScript(sharedReleaseSource)

	// The SHA1s of the prepared commands' scripts, boxed once (see lockRef).
	acquireSHA       any = acquireScript.Hash()
	releaseSHA       any = releaseScript.Hash()
	sharedAcquireSHA any = redis.NewScript(sharedAcquireSource).Hash()
	sharedReleaseSHA any = sharedReleaseScript.Hash()
	semAcquireSHA    any = redis.NewScript(semAcquireSource).Hash()
	semReleaseSHA    any = redis.NewScript(semReleaseSource).Hash()
	multiAcquireSHA  any = redis.NewScript(multiAcquireSource).Hash()
	multiExtendSHA   any = redis.NewScript(multiExtendSource).Hash()
	multiReleaseSHA  any = redis.NewScript(multiReleaseSource).Hash()
	multiPTTLSHA     any = redis.NewScript(multiPTTLSource).Hash()
	inspectSHA       any = inspectScript.Hash()
)

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
