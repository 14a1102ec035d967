package bench

import (
	"bufio"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// commandStats maps a command name (as INFO commandstats spells it after
// "cmdstat_", e.g. "evalsha" or "client|tracking") to its calls.
type commandStats map[string]int64

// parseCommandStats reads the output of INFO commandstats. It returns an
// error for a cmdstat line without a readable calls field, so that a
// changed format fails loudly instead of counting zero.
func parseCommandStats(info string) (commandStats, error) {
	stats := commandStats{}
	scanner := bufio.NewScanner(strings.NewReader(info))
	for scanner.Scan() {
		line := strings.TrimSpace(scanner.Text())
		name, fields, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		name = strings.TrimPrefix(name, "cmdstat_")
		calls := int64(-1)
		for field := range strings.SplitSeq(fields, ",") {
			key, value, _ := strings.Cut(field, "=")
			if key == "calls" {
				n, err := strconv.ParseInt(value, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("commandstats line %q: calls: %w", line, err)
				}
				calls = n
			}
		}
		if calls < 0 {
			return nil, fmt.Errorf("commandstats line %q has no calls field", line)
		}
		stats[name] = calls
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
