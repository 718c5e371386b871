package librarian

import (
	"fmt"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
)

// Fixture files, one small program per language.
var edgeFixtures = map[string]string{
	"shop/pricing.py": `import math
import os.path as osp
from .tax import vat_rate, round_cents as rc
from shop import util


def net_price(gross):
    """Price without tax."""
    return rc(gross / (1 + vat_rate()))


class Cart:
    """Cart holds line items."""
    def __init__(self):
        self.items = []

    def total(self):
        s = sum(net_price(i) for i in self.items)
        return math.floor(self.rounded(s)) + util.fee(s)

    def rounded(self, s):
        return rc(s)
`,
	"web/src/cart.ts": `import { formatMoney, parse as parseMoney } from './money';
import * as api from "../lib/api";
import React from 'react';
import './styles.css';
const lodash = require('lodash');
import {
  a,
  b,
} from './letters';

// Sum of a list of prices.
export function total(prices: number[]): number {
  return prices.reduce((a, b) => a + b, 0);
}

export const render = (prices: number[]) => {
  const t = total(prices);
  api.send(formatMoney(t));
  return parseMoney(String(t));
};
`,
	"src/main/java/com/acme/Billing.java": `package com.acme;

import java.util.List;
import static com.acme.util.Money.format;

/** Billing computes invoices. */
public class Billing {
    public int invoiceTotal(List<Integer> lines) {
        int t = sum(lines);
        return format(t);
    }

    private static int sum(List<Integer> xs) {
        return xs.size();
    }
}
`,
	"crates/ledger/src/lib.rs": `use std::collections::HashMap;
use crate::money::{parse, Amount as Amt};
mod money;

/// Balance of an account.
pub fn balance(entries: &[i64]) -> i64 {
    let m: HashMap<i64, i64> = HashMap::new();
    helper(entries) + parse("1")
}

fn helper(entries: &[i64]) -> i64 {
    entries.iter().sum()
}

pub struct Ledger {
    entries: Vec<i64>,
}

impl Ledger {
    pub fn sum(&self) -> i64 {
        balance(&self.entries)
    }
}
`,
	"native/queue.c": `#include <stdio.h>
#include "queue.h"

/* queue_push appends a value. */
int queue_push(struct queue *q, int v)
{
    if (q == NULL) {
        return -1;
    }
    return grow(q) + v;
}

static int grow(struct queue *q)
{
    printf("grow\n");
    return 0;
}
`,
}

func edgeStrings(edges []edgeRow, kind string) []string {
	var out []string
	for _, e := range edges {
		if e.kind == kind {
			out = append(out, fmt.Sprintf("%s -> %s @%d", e.source, e.target, e.line))
		}
	}
	sort.Strings(out)
	return out
}

func symbolStrings(syms []symbolRow) []string {
	var out []string
	for _, s := range syms {
		out = append(out, fmt.Sprintf("%s %s %d-%d", s.kind, s.id, s.lineStart, s.lineEnd))
	}
	return out
}

func unitsOf(rel string) ([]symbolRow, []edgeRow) {
	lines := splitLines(edgeFixtures[rel])
	lang := detectLanguage(rel)
	return otherUnits(lang, rel, lines, heuristicUnits(lang, lines))
}

func TestOtherLanguageEdges(t *testing.T) {
	t.Parallel()
	t.Run("python", func(t *testing.T) {
		syms, edges := unitsOf("shop/pricing.py")
		require.Equal(t, []string{
			"function shop.pricing.net_price 7-9",
			"class shop.pricing.Cart 12-22",
			"method shop.pricing.Cart.__init__ 14-15",
			"method shop.pricing.Cart.total 17-19",
			"method shop.pricing.Cart.rounded 21-22",
		}, symbolStrings(syms))
		require.Equal(t, "Price without tax.", syms[0].doc)
		require.Equal(t, "Cart holds line items.", syms[1].doc)
		require.Equal(t, []string{
			"file:shop/pricing.py -> math @1",
			"file:shop/pricing.py -> os.path @2",
			"file:shop/pricing.py -> shop @4",
			"file:shop/pricing.py -> shop.tax @3",
		}, edgeStrings(edges, "imports"))
		require.Equal(t, []string{
			"shop.pricing.Cart.rounded -> shop.tax.round_cents @22",
			"shop.pricing.Cart.total -> math.floor @19",
			"shop.pricing.Cart.total -> shop.pricing.Cart.rounded @19",
			"shop.pricing.Cart.total -> shop.pricing.net_price @18",
			"shop.pricing.Cart.total -> shop.util.fee @19",
			"shop.pricing.net_price -> shop.tax.round_cents @9",
			"shop.pricing.net_price -> shop.tax.vat_rate @9",
		}, edgeStrings(edges, "calls"))
	})
	t.Run("typescript", func(t *testing.T) {
		syms, edges := unitsOf("web/src/cart.ts")
		require.Equal(t, []string{"function web/src/cart.total 12-14", "function web/src/cart.render 16-20"}, symbolStrings(syms))
		require.Equal(t, "Sum of a list of prices.", syms[0].doc)
		require.Equal(t, []string{
			"file:web/src/cart.ts -> lodash @5",
			"file:web/src/cart.ts -> react @3",
			"file:web/src/cart.ts -> web/lib/api @2",
			"file:web/src/cart.ts -> web/src/letters @9",
			"file:web/src/cart.ts -> web/src/money @1",
			"file:web/src/cart.ts -> web/src/styles.css @4",
		}, edgeStrings(edges, "imports"))
		require.Equal(t, []string{
			"web/src/cart.render -> web/lib/api.send @18",
			"web/src/cart.render -> web/src/cart.total @17",
			"web/src/cart.render -> web/src/money.formatMoney @18",
			"web/src/cart.render -> web/src/money.parse @19",
		}, edgeStrings(edges, "calls"))
	})
	t.Run("java", func(t *testing.T) {
		syms, edges := unitsOf("src/main/java/com/acme/Billing.java")
		require.Equal(t, []string{
			"class com.acme.Billing 7-16",
			"method com.acme.Billing.invoiceTotal 8-11",
			"method com.acme.Billing.sum 13-15",
		}, symbolStrings(syms))
		require.Equal(t, "Billing computes invoices.", syms[0].doc)
		require.Equal(t, []string{
			"file:src/main/java/com/acme/Billing.java -> com.acme.util.Money.format @4",
			"file:src/main/java/com/acme/Billing.java -> java.util.List @3",
		}, edgeStrings(edges, "imports"))
		require.Equal(t, []string{
			"com.acme.Billing.invoiceTotal -> com.acme.Billing.sum @9",
			"com.acme.Billing.invoiceTotal -> com.acme.util.Money.format @10",
		}, edgeStrings(edges, "calls"))
	})
	t.Run("rust", func(t *testing.T) {
		syms, edges := unitsOf("crates/ledger/src/lib.rs")
		require.Equal(t, []string{
			"function crates/ledger/src/lib.balance 6-9",
			"function crates/ledger/src/lib.helper 11-13",
			"type crates/ledger/src/lib.Ledger 15-17",
			"class crates/ledger/src/lib.Ledger 19-23",
			"method crates/ledger/src/lib.Ledger.sum 20-22",
		}, symbolStrings(syms))
		require.Equal(t, "Balance of an account.", syms[0].doc)
		require.Equal(t, []string{
			"file:crates/ledger/src/lib.rs -> crate::money::Amount @2",
			"file:crates/ledger/src/lib.rs -> crate::money::parse @2",
			"file:crates/ledger/src/lib.rs -> crates/ledger/src/money @3",
			"file:crates/ledger/src/lib.rs -> std::collections::HashMap @1",
		}, edgeStrings(edges, "imports"))
		require.Equal(t, []string{
			"crates/ledger/src/lib.Ledger.sum -> crates/ledger/src/lib.balance @21",
			"crates/ledger/src/lib.balance -> crate::money::parse @8",
			"crates/ledger/src/lib.balance -> crates/ledger/src/lib.helper @8",
		}, edgeStrings(edges, "calls"))
	})
	t.Run("c", func(t *testing.T) {
		syms, edges := unitsOf("native/queue.c")
		require.Equal(t, []string{"function native/queue.queue_push 5-11", "function native/queue.grow 13-17"}, symbolStrings(syms))
		require.Equal(t, "queue_push appends a value.", syms[0].doc)
		require.Equal(t, []string{
			"file:native/queue.c -> queue.h @2",
			"file:native/queue.c -> stdio.h @1",
		}, edgeStrings(edges, "imports"))
		require.Equal(t, []string{"native/queue.queue_push -> native/queue.grow @10"}, edgeStrings(edges, "calls"))
	})
}

func TestPythonMultiLineImport(t *testing.T) {
	t.Parallel()
	src := "from pkg.money import (\n    parse,\n    fmt as format_money,  # display\n)\n\n\ndef show(x):\n    return format_money(parse(x))\n"
	lines := splitLines(src)
	_, edges := otherUnits("python", "app/view.py", lines, heuristicUnits("python", lines))
	require.Equal(t, []string{"file:app/view.py -> pkg.money @1"}, edgeStrings(edges, "imports"))
	require.Equal(t, []string{"app.view.show -> pkg.money.fmt @8", "app.view.show -> pkg.money.parse @8"}, edgeStrings(edges, "calls"))
}

// TestOtherLanguageEdgesQueries indexes the fixtures and queries them like
// Go code.
func TestOtherLanguageEdgesQueries(t *testing.T) {
	t.Parallel()
	h := newHarness(t, false)
	ctx := as(t, "t1")
	root := gitRepo(t, edgeFixtures)
	repo := create(t, ctx, h.svc, root, true)

	deps, err := h.svc.GetDependencies(ctx, &librarianv1.GetDependenciesRequest{Repository: repo.GetName(), Symbol: "file:shop/pricing.py", EdgeKind: "imports"})
	require.NoError(t, err)
	var targets []string
	for _, e := range deps.GetEdges() {
		targets = append(targets, e.GetTarget())
	}
	require.ElementsMatch(t, []string{"math", "os.path", "shop", "shop.tax"}, targets)

	calls, err := h.svc.GetDependencies(ctx, &librarianv1.GetDependenciesRequest{Repository: repo.GetName(), Symbol: "shop.pricing.Cart.total", EdgeKind: "calls"})
	require.NoError(t, err)
	require.Len(t, calls.GetEdges(), 4)

	users, err := h.svc.GetDependents(ctx, &librarianv1.GetDependentsRequest{Repository: repo.GetName(), Symbol: "web/src/money"})
	require.NoError(t, err)
	require.Len(t, users.GetEdges(), 1)
	require.Equal(t, "file:web/src/cart.ts", users.GetEdges()[0].GetSource())
	require.Equal(t, int32(1), users.GetEdges()[0].GetLine())

	callers, err := h.svc.GetDependents(ctx, &librarianv1.GetDependentsRequest{Repository: repo.GetName(), Symbol: "crates/ledger/src/lib.balance", EdgeKind: "calls"})
	require.NoError(t, err)
	require.Len(t, callers.GetEdges(), 1)
	require.Equal(t, "crates/ledger/src/lib.Ledger.sum", callers.GetEdges()[0].GetSource())

	sym, err := h.svc.GetSymbol(ctx, &librarianv1.GetSymbolRequest{Repository: repo.GetName(), Symbol: "com.acme.Billing.invoiceTotal", IncludeSource: true})
	require.NoError(t, err)
	require.Equal(t, "method", sym.GetSymbol().GetKind())
	require.Equal(t, "src/main/java/com/acme/Billing.java", sym.GetSymbol().GetPath())
	require.Contains(t, sym.GetSymbol().GetSource(), "return format(t);")

	fileSyms, err := h.svc.GetFileSymbols(ctx, &librarianv1.GetFileSymbolsRequest{Repository: repo.GetName(), Path: "native/queue.c"})
	require.NoError(t, err)
	require.Len(t, fileSyms.GetSymbols(), 2)

	// Another tenant sees none of it.
	_, err = h.svc.GetDependents(as(t, "other"), &librarianv1.GetDependentsRequest{Repository: repo.GetName(), Symbol: "web/src/money"})
	require.Error(t, err)
}

// BenchmarkOtherUnits measures symbol and edge extraction over a large
// Python file (about 10,000 lines).
func BenchmarkOtherUnits(b *testing.B) {
	var src []byte
	for i := 0; i < 500; i++ {
		src = fmt.Appendf(src, "from pkg.mod%d import helper%d\n\n\nclass Widget%d:\n    \"\"\"Widget number %d.\"\"\"\n\n    def run(self, x):\n        return helper%d(x) + self.size(x)\n\n    def size(self, x):\n        return len(str(x))\n\n\ndef build%d(n):\n    # Build a widget.\n    w = Widget%d()\n    return w.run(n)\n\n\n", i, i, i, i, i, i, i)
	}
	lines := splitLines(string(src))
	b.SetBytes(int64(len(src)))
	b.ReportAllocs()
	for b.Loop() {
		syms, edges := otherUnits("python", "pkg/widgets.py", lines, heuristicUnits("python", lines))
		if len(syms) != 2000 || len(edges) == 0 {
			b.Fatalf("%d symbols, %d edges", len(syms), len(edges))
		}
	}
}
