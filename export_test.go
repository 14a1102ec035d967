package redislock

// DisableRestartWatch turns the restart watch off for Clients set up from
// now on, until the returned function turns it back on: the fence trials
// measure the two-holder windows with and without it.
func DisableRestartWatch() (restore func()) {
	restartWatchOff.Store(true)
	return func() { restartWatchOff.Store(false) }
}
