package bench

import (
	"bufio"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// commandStats maps a command name (as INFO commandstats spells it after
// "cmdstat_", e.g. "evalsha" or "client|tracking") to its calls.
type commandStats map[string]int64

// parseCommandStats reads the output of INFO commandstats. It returns an
// error for a cmdstat line without a readable calls field, so that a
// changed format fails loudly instead of counting zero.
func parseCommandStats(info string) (commandStats, error) {
	return parseCommandField(info, "calls")
}

// parseCommandField reads one field of every cmdstat line of INFO
// commandstats ("calls", or "usec": the microseconds the server spent in
// the command, a script's own commands included in the script's).
func parseCommandField(info, field string) (commandStats, error) {
	stats := commandStats{}
	scanner := bufio.NewScanner(strings.NewReader(info))
	for scanner.Scan() {
		line := strings.TrimSpace(scanner.Text())
		name, fields, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		name = strings.TrimPrefix(name, "cmdstat_")
		n := int64(-1)
		for f := range strings.SplitSeq(fields, ",") {
			key, value, _ := strings.Cut(f, "=")
			if key == field {
				v, err := strconv.ParseInt(value, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("commandstats line %q: %s: %w", line, field, err)
				}
				n = v
			}
		}
		if n < 0 {
			return nil, fmt.Errorf("commandstats line %q has no %s field", line, field)
		}
		stats[name] = n
	}
	return stats, scanner.Err()
}

// since returns the calls made between before and s, per command.
func (s commandStats) since(before commandStats) commandStats {
	diff := commandStats{}
	for name, calls := range s {
		if d := calls - before[name]; d != 0 {
			diff[name] = d
		}
	}
	return diff
}

// total sums the calls of every command but INFO, which is how the
// harness itself reads the statistics. Commands that Lua scripts run
// (redis.call) are counted by Redis as calls too.
func (s commandStats) total() int64 {
	var sum int64
	for name, calls := range s {
		if name != "info" {
			sum += calls
		}
	}
	return sum
}

// String lists the commands by name, for benchmark logs.
func (s commandStats) String() string {
	names := make([]string, 0, len(s))
	for name := range s {
		names = append(names, name)
	}
	slices.Sort(names)
	var sb strings.Builder
	for i, name := range names {
		if i > 0 {
			sb.WriteString(" ")
		}
		fmt.Fprintf(&sb, "%s=%d", name, s[name])
	}
	return sb.String()
}

// readCommandStats sends INFO commandstats.
func readCommandStats(ctx context.Context, rdb *redis.Client) (commandStats, error) {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, fmt.Errorf("INFO commandstats: %w", err)
	}
	return parseCommandStats(info)
}

// serverWork is what a redis-server reports of its own work: each
// command's calls and microseconds (INFO commandstats) and the CPU time of
// its process, user and system (INFO cpu), network reads and writes
// included.
type serverWork struct {
	calls, micros commandStats
	cpu           time.Duration
}

// readServerWork sends INFO commandstats cpu.
func readServerWork(ctx context.Context, rdb *redis.Client) (serverWork, error) {
	info, err := rdb.Info(ctx, "commandstats", "cpu").Result()
	if err != nil {
		return serverWork{}, fmt.Errorf("INFO commandstats cpu: %w", err)
	}
	return parseServerWork(info)
}

// parseServerWork reads the output of INFO commandstats cpu; a missing
// used_cpu_sys or used_cpu_user line is an error.
func parseServerWork(info string) (serverWork, error) {
	var w serverWork
	var err error
	if w.calls, err = parseCommandField(info, "calls"); err != nil {
		return w, err
	}
	if w.micros, err = parseCommandField(info, "usec"); err != nil {
		return w, err
	}
	for _, field := range []string{"used_cpu_sys", "used_cpu_user"} {
		found := false
		for line := range strings.SplitSeq(info, "\n") {
			name, value, ok := strings.Cut(strings.TrimSpace(line), ":")
			if !ok || name != field {
				continue
			}
			seconds, err := strconv.ParseFloat(value, 64)
			if err != nil {
				return w, fmt.Errorf("INFO cpu line %q: %w", line, err)
			}
			w.cpu += time.Duration(seconds * float64(time.Second))
			found = true
		}
		if !found {
			return w, fmt.Errorf("INFO cpu has no %s line", field)
		}
	}
	return w, nil
}

// since returns the work done between before and w.
func (w serverWork) since(before serverWork) serverWork {
	return serverWork{calls: w.calls.since(before.calls), micros: w.micros.since(before.micros), cpu: w.cpu - before.cpu}
}

// scriptMicros is the time the server spent running scripts (EVAL,
// EVALSHA and their read-only forms), the commands they ran included.
func (w serverWork) scriptMicros() int64 {
	return w.micros["eval"] + w.micros["evalsha"] + w.micros["eval_ro"] + w.micros["evalsha_ro"]
}
