module github.com/redislock/redislock/docs/snippets

go 1.26.0
