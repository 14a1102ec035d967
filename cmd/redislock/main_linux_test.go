package main

import (
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock/internal/redistest"
)

func TestParentDeath(t *testing.T) {
	t.Parallel()
	t.Run("redislock killed with SIGKILL takes its command down with it", func(t *testing.T) {
		t.Parallel()
		srv, dir := redistest.Start(t), t.TempDir()
		p := startCLI(t, serverEnv(srv, dir), "run", "job", "--", "sh", "-c", `echo $$ > "$D/pid"; while :; do sleep 0.01; done`)
		pid := readPID(t, filepath.Join(dir, "pid"))

		require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
		require.Equal(t, -1, p.wait(t), "killed by a signal")
		eventually(t, "the orphaned command to be killed (Pdeathsig)", func() bool { return processGone(pid) })
	})
}
