package archivalist

import (
	"google.golang.org/grpc/codes"

	"sylk.dev/sylk/pkg/apierr"
)

// The archivalist's errors a client may see, each with a stable reason
// (pkg/apierr). Handlers pass every other error through apierr.Status.
var (
	// errNotFound matches any entry's not-found error (errors.Is compares
	// code and reason); the store returns entryNotFound.
	errNotFound = apierr.NotFound("entry", "")
	// errDuplicate: the bus message was stored already (the inbox counts
	// it; no API call stores under a message id).
	errDuplicate = apierr.New(codes.AlreadyExists, "ENTRY_ALREADY_STORED", "entry already stored")
	// errViewer: a viewer may read entries, not create them.
	errViewer = apierr.New(codes.PermissionDenied, reasonViewerReadOnly, "viewers cannot create entries")
	// errNoEntry: CreateEntry without an entry.
	errNoEntry = apierr.Invalid("entry", "required")
)

// reasonViewerReadOnly: the caller's role may read, not write.
const reasonViewerReadOnly = "VIEWER_READ_ONLY"

// entryNotFound says the tenant holds no entry id the caller may read.
func entryNotFound(id string) error { return apierr.NotFound("entry", namePrefix+id) }
