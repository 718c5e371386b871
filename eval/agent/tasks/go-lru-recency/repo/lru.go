// Package lru is a fixed-size cache that evicts the least recently used
// entry.
package lru

import "container/list"

type entry struct {
	key   string
	value any
}

// Cache is an LRU cache. It is not safe for concurrent use.
type Cache struct {
	capacity int
	ll       *list.List
	items    map[string]*list.Element
}

// New returns a cache that holds at most capacity entries.
func New(capacity int) *Cache {
	if capacity < 1 {
		capacity = 1
	}
	return &Cache{capacity: capacity, ll: list.New(), items: make(map[string]*list.Element)}
}

// Get returns the value stored under key and marks it as used.
func (c *Cache) Get(key string) (any, bool) {
	el, ok := c.items[key]
	if !ok {
		return nil, false
	}
	return el.Value.(*entry).value, true
}

// Put stores value under key. When the cache is full, the least recently
// used entry is evicted.
func (c *Cache) Put(key string, value any) {
	if el, ok := c.items[key]; ok {
		el.Value.(*entry).value = value
		c.ll.MoveToFront(el)
		return
	}
	c.items[key] = c.ll.PushFront(&entry{key: key, value: value})
	if c.ll.Len() > c.capacity {
		oldest := c.ll.Back()
		c.ll.Remove(oldest)
		delete(c.items, oldest.Value.(*entry).key)
	}
}

// Len returns the number of entries.
func (c *Cache) Len() int { return c.ll.Len() }

// Keys returns the keys from the most to the least recently used.
func (c *Cache) Keys() []string {
	keys := make([]string, 0, c.ll.Len())
	for el := c.ll.Front(); el != nil; el = el.Next() {
		keys = append(keys, el.Value.(*entry).key)
	}
	return keys
}
