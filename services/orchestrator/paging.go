package orchestrator

import "sylk.dev/sylk/pkg/apierr"

// Pages of ListRuns and ListReviews: newest first, a page token naming
// the last row's creation time and id.

// pageOf reads a page request: its size (the default for 0, at most the
// largest) and where it starts (nil: at the newest).
func (s *Service) pageOf(asked int32, token string) (int, *pageCursor, error) {
	size := int(asked)
	switch {
	case size < 0:
		return 0, nil, apierr.Invalid("page_size", "must not be negative")
	case size == 0:
		size = s.cfg.DefaultPageSize
	case size > s.cfg.MaxPageSize:
		size = s.cfg.MaxPageSize
	}
	if token == "" {
		return size, nil, nil
	}
	cursor, err := decodeCursor(token)
	if err != nil {
		return 0, nil, apierr.Invalid("page_token", "is invalid")
	}
	return size, cursor, nil
}

// page cuts rows, read one past size, to size, and returns the token of
// the next page ("" when there is none).
func page[T any](rows []T, size int, key func(T) pageCursor) ([]T, string) {
	if len(rows) <= size {
		return rows, ""
	}
	rows = rows[:size]
	return rows, encodeCursor(key(rows[len(rows)-1]))
}
