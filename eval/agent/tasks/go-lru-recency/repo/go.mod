module example.com/go-lru-recency

go 1.22
