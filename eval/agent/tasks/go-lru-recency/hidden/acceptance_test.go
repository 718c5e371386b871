package lru_test

import (
	"reflect"
	"testing"

	"example.com/go-lru-recency"
)

func TestAcceptGetKeepsEntryAlive(t *testing.T) {
	c := lru.New(2)
	c.Put("a", 1)
	c.Put("b", 2)
	if _, ok := c.Get("a"); !ok {
		t.Fatal("Get(a) missed")
	}
	c.Put("c", 3)
	if _, ok := c.Get("a"); !ok {
		t.Fatal("a was read last and should have survived")
	}
	if _, ok := c.Get("b"); ok {
		t.Fatal("b was the least recently used and should have been evicted")
	}
}

func TestAcceptKeysFollowReads(t *testing.T) {
	c := lru.New(3)
	c.Put("a", 1)
	c.Put("b", 2)
	c.Put("c", 3)
	c.Get("a")
	c.Get("b")
	if got, want := c.Keys(), []string{"b", "a", "c"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Keys() = %v; want %v", got, want)
	}
	c.Get("missing")
	if got, want := c.Keys(), []string{"b", "a", "c"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("after a miss Keys() = %v; want %v", got, want)
	}
}
