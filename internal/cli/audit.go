package cli

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	adminv1 "sylk.dev/sylk/gen/go/sylk/admin/v1"
)

func auditCommands() []command {
	return []command{
		{name: "list", summary: "list the tenant's audit records, newest first (admins)", run: runAuditList},
		{name: "verify", summary: "check the audit log's hash chain (admins)", run: runAuditVerify},
	}
}

func runAuditList(ctx context.Context, e *env, args []string) error {
	fs := e.flags("sylk audit list", "[flags]",
		"Lists the tenant's audit records, newest first: keys created and revoked, credentials\n"+
			"stored, plans approved, runs created and cancelled, repositories registered, branches\n"+
			"pushed, permission denials. Needs an admin key.")
	action := fs.String("action", "", "only this action (api_key.created, run.cancelled, ...)")
	actor := fs.String("actor", "", "only this user's records")
	since := fs.Duration("since", 0, "only records of this long ago or later (0: all)")
	limit := fs.Int("n", 50, "at most this many records")
	if _, err := parseN(fs, args, 0, ""); err != nil {
		return err
	}
	q := url.Values{"pageSize": {strconv.Itoa(*limit)}}
	if *action != "" {
		q.Set("action", *action)
	}
	if *actor != "" {
		q.Set("actor", *actor)
	}
	if *since > 0 {
		q.Set("startTime", time.Now().Add(-*since).UTC().Format(time.RFC3339))
	}
	var resp adminv1.ListAuditRecordsResponse
	if done, err := e.request(ctx, http.MethodGet, "/v1/audit?"+q.Encode(), nil, &resp); done {
		return err
	}
	if len(resp.GetRecords()) == 0 {
		fmt.Fprintln(e.out, "No records.")
	}
	for _, r := range resp.GetRecords() {
		fmt.Fprintf(e.out, "%6d  %s  %-16s %-22s %s%s\n", r.GetSequence(), r.GetCreateTime().AsTime().Local().Format(time.DateTime),
			r.GetActor(), r.GetAction(), r.GetTarget(), auditDetails(r.GetDetails()))
	}
	return nil
}

func auditDetails(d map[string]string) string {
	if len(d) == 0 {
		return ""
	}
	return "  " + groupLabel(d)
}

// runAuditVerify walks the chain; a broken chain exits 7.
func runAuditVerify(ctx context.Context, e *env, args []string) error {
	fs := e.flags("sylk audit verify", "[flags]",
		"Walks the tenant's audit chain from its first record. Exits 0 when it is intact,\n"+
			"7 at the first record edited, deleted or reordered. Needs an admin key.")
	if _, err := parseN(fs, args, 0, ""); err != nil {
		return err
	}
	var resp adminv1.VerifyAuditLogResponse
	done, err := e.request(ctx, http.MethodPost, "/v1/audit:verify", &adminv1.VerifyAuditLogRequest{}, &resp)
	if err != nil {
		return err
	}
	if !done {
		if resp.GetIntact() {
			fmt.Fprintf(e.out, "Intact: %d records checked, head %d.\n", resp.GetRecordsChecked(), resp.GetHeadSequence())
		} else {
			b := resp.GetFirstBreak()
			fmt.Fprintf(e.out, "Broken at record %d (%s): %s.\n", b.GetSequence(), b.GetRecordId(),
				strings.ToLower(strings.TrimPrefix(b.GetProblem().String(), "AUDIT_PROBLEM_")))
		}
	}
	if !resp.GetIntact() {
		return &Error{Code: ExitFailed, Err: fmt.Errorf("the audit log is not intact")}
	}
	return nil
}
