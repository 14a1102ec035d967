package redislock

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts live in lua/*.lua, each with a header giving its KEYS,
// ARGV and replies, wrapped once here; redis.Script.Run falls back from
// EVALSHA to EVAL after NOSCRIPT (a restart, SCRIPT FLUSH): no loading step.
var (
	//go:embed lua/acquire.lua
	acquireSource string
	//go:embed lua/extend.lua
	extendSource string
	//go:embed lua/release.lua
	releaseBody string
	// handover.lua: a function release.lua, shared_release.lua and break.lua start with.
	//go:embed lua/handover.lua
	handoverSource string
	releaseSource  = handoverSource + releaseBody
	//go:embed lua/pttl.lua
	pttlSource string
	// state.lua is a function that inspect.lua and break.lua start with.
	//go:embed lua/state.lua
	stateSource string
	//go:embed lua/inspect.lua
	inspectSource string
	//go:embed lua/break.lua
	breakSource string

	acquireScript = redis.NewScript(acquireSource)
	extendScript  = redis.NewScript(extendSource)
	releaseScript = redis.NewScript(releaseSource)
	pttlScript    = redis.NewScript(pttlSource)
	inspectScript = redis.NewScript(stateSource + inspectSource)
	breakScript   = redis.NewScript(stateSource + handoverSource + breakSource)

	// The semaphore's own scripts (see semaphore.go).
	//go:embed lua/semaphore_acquire.lua
	semAcquireSource string
	//go:embed lua/semaphore_extend.lua
	semExtendSource string
	//go:embed lua/semaphore_release.lua
	semReleaseBody   string
	semReleaseSource = handoverSource + semReleaseBody
	//go:embed lua/semaphore_pttl.lua
	semPTTLSource string

	semAcquireScript = redis.NewScript(semAcquireSource)
	semExtendScript  = redis.NewScript(semExtendSource)
	semReleaseScript = redis.NewScript(semReleaseSource)
	semPTTLScript    = redis.NewScript(semPTTLSource)

	// AcquireMulti's scripts (see multi.go).
	//go:embed lua/multi_acquire.lua
	multiAcquireSource string
	//go:embed lua/multi_extend.lua
	multiExtendSource string
	//go:embed lua/multi_release.lua
	multiReleaseSource string
	//go:embed lua/multi_pttl.lua
	multiPTTLSource string

	multiAcquireScript = redis.NewScript(multiAcquireSource)
	multiExtendScript  = redis.NewScript(multiExtendSource)
	multiReleaseScript = redis.NewScript(multiReleaseSource)
	multiPTTLScript    = redis.NewScript(multiPTTLSource)

	// The SHA1s, boxed once for the prebuilt commands (see lockRef).
	acquireSHA      any = acquireScript.Hash()
	releaseSHA      any = releaseScript.Hash()
	semAcquireSHA   any = semAcquireScript.Hash()
	semReleaseSHA   any = semReleaseScript.Hash()
	multiAcquireSHA any = multiAcquireScript.Hash()
	multiExtendSHA  any = multiExtendScript.Hash()
	multiReleaseSHA any = multiReleaseScript.Hash()
	multiPTTLSHA    any = multiPTTLScript.Hash()
)

// The shared hold's scripts (see shared.go).
var (
	//go:embed lua/shared_acquire.lua
	sharedAcquireSource string
	//go:embed lua/shared_extend.lua
	sharedExtendSource string
	//go:embed lua/shared_release.lua
	sharedReleaseBody   string
	sharedReleaseSource = handoverSource + sharedReleaseBody
	//go:embed lua/shared_pttl.lua
	sharedPTTLSource string

	sharedAcquireScript = redis.NewScript(sharedAcquireSource)
	sharedExtendScript  = redis.NewScript(sharedExtendSource)
	sharedReleaseScript = redis.NewScript(sharedReleaseSource)
	sharedPTTLScript    = redis.NewScript(sharedPTTLSource)

	sharedAcquireSHA any = sharedAcquireScript.Hash()
	sharedReleaseSHA any = sharedReleaseScript.Hash()
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
