package redislock_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// The docs quote go-redis' default timeouts ("go-redis' defaults (5 s
// dial, 5 s read and write timeouts)"): each figure quoted is the one of
// the go-redis this module builds with (go.sum), read from the options
// go-redis fills in.
func TestTheDocsQuoteGoRedisDefaultsOfTheVersionInGoSum(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	opts := rdb.Options()
	want := map[string]time.Duration{"dial": opts.DialTimeout, "read": opts.ReadTimeout, "write": opts.WriteTimeout}

	docs, err := filepath.Glob("docs/*.md")
	require.NoError(t, err)
	figure := regexp.MustCompile(`go-redis' defaults \(([^)]*)\)`)
	timeout := regexp.MustCompile(`(\d+(?:\.\d+)?) ?s ((?:dial|read|write)(?:(?:,| and) (?:dial|read|write))*)`)
	word := regexp.MustCompile(`dial|read|write`)
	quoted := 0
	for _, doc := range append(docs, "README.md") {
		data, err := os.ReadFile(doc)
		require.NoError(t, err)
		for _, m := range figure.FindAllStringSubmatch(string(data), -1) {
			for _, f := range timeout.FindAllStringSubmatch(m[1], -1) {
				seconds, err := strconv.ParseFloat(f[1], 64)
				require.NoError(t, err)
				for _, which := range word.FindAllString(f[2], -1) {
					require.Equal(t, want[which], time.Duration(seconds*float64(time.Second)),
						"%s quotes go-redis' %s timeout as %q", doc, which, f[0])
					quoted++
				}
			}
		}
	}
	require.NotZero(t, quoted, "no doc quotes go-redis' default timeouts any more: drop this test")
}
