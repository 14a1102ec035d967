//go:build unix

package podproc

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Pod is a running pod process.
type Pod struct {
	Name    string
	Cmd     *exec.Cmd
	Stdin   io.WriteCloser
	relayed chan struct{} // closed when its output ends
}

// StartPod starts exe as the pod called name (podVar=name and env added to
// the runner's environment) and relays each line it prints to tl; a line
// that holds one of marks is also handed to onMark, on the relay goroutine.
func StartPod(tl *Timeline, exe, podVar, name string, env, marks []string, onMark func(mark string)) (*Pod, error) {
	cmd := exec.Command(exe)
	cmd.Env = append(append(os.Environ(), podVar+"="+name), env...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = SysProcAttr() // a group of its own, so that a freeze lasts
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	p := &Pod{Name: name, Cmd: cmd, Stdin: stdin, relayed: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		defer close(p.relayed)
		lines := bufio.NewScanner(stdout)
		for lines.Scan() {
			tl.Print(lines.Text() + "\n")
			for _, mark := range marks {
				if strings.Contains(lines.Text(), mark) {
					onMark(mark)
				}
			}
		}
	}()
	return p, nil
}

// Relayed is closed when the pod's output ends.
func (p *Pod) Relayed() <-chan struct{} { return p.relayed }

// Continue wakes the pod from a freeze (SIGCONT).
func (p *Pod) Continue() error { return p.Cmd.Process.Signal(syscall.SIGCONT) }

// Wait waits for the pod's output to end, then for the pod (in that order:
// Wait closes the pipe).
func (p *Pod) Wait() error {
	<-p.relayed
	if err := p.Cmd.Wait(); err != nil {
		return fmt.Errorf("%s: %w", p.Name, err)
	}
	return nil
}

// Kill ends the pod if it still runs, stopped or not (after an early
// return), and reaps it.
func (p *Pod) Kill() {
	if p.Cmd.ProcessState != nil {
		return
	}
	_ = p.Cmd.Process.Kill()
	_ = p.Continue()
	<-p.relayed
	_ = p.Cmd.Wait()
}

// PodSetup reads what every pod's environment carries: the run's start
// (Unix nanoseconds) in startVar and the lock's TTL in ttlVar. It returns a
// Timeline on stdout that counts from that start, as the runner's does.
func PodSetup(startVar, ttlVar string) (*Timeline, time.Duration, error) {
	start, err := strconv.ParseInt(os.Getenv(startVar), 10, 64)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", startVar, err)
	}
	ttl, err := time.ParseDuration(os.Getenv(ttlVar))
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", ttlVar, err)
	}
	return NewTimeline(os.Stdout, time.Unix(0, start)), ttl, nil
}
