package academic

import (
	"google.golang.org/grpc/codes"

	"sylk.dev/sylk/pkg/apierr"
)

// The academic's errors a client may see, each with a stable reason
// (pkg/apierr). Handlers pass every other error through apierr.Status.
var (
	// errNotFound matches any document's not-found error (errors.Is
	// compares code and reason); the store returns documentNotFound.
	errNotFound = apierr.NotFound("document", "")
	// errViewer: a viewer may read documents, not create them.
	errViewer = apierr.New(codes.PermissionDenied, reasonViewerReadOnly, "viewers cannot create documents")
	// errNoDocument: CreateDocument without a document.
	errNoDocument = apierr.Invalid("document", "required")
	// errNoExpectationsSubject: a domain expectations request names
	// neither a feature domain nor a request.
	errNoExpectationsSubject = apierr.Invalid("feature_domain", "feature_domain or request is required")
)

// reasonViewerReadOnly: the caller's role may read, not write.
const reasonViewerReadOnly = "VIEWER_READ_ONLY"

// documentNotFound says the tenant holds no document id.
func documentNotFound(id string) error { return apierr.NotFound("document", namePrefix+id) }
