package topology

import (
	"google.golang.org/protobuf/types/known/timestamppb"

	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
)

// MaxRecordBytes is the Archivalist's default bound on a record's content
// (-archivalist.max-content-bytes): agents clip what they record to it.
const MaxRecordBytes = 64 << 10

// Record is an entry an agent stores in the Archivalist's history.
type Record struct {
	// ID is the message id: a record sent again under it is a duplicate.
	ID, Tenant, Session, Correlation string
	// User is whose work it records (the Archivalist keeps some categories
	// private to their user).
	User string
	// Source is the agent that records it.
	Source, Category, Title, Text string
	// Repository is the registered repository it is about
	// ("repositories/{id}"), or "".
	Repository string
}

// StoreRequest is the envelope that asks the Archivalist to store r.
func StoreRequest(r Record) *messagev1.Envelope {
	return &messagev1.Envelope{
		Id:            r.ID,
		CorrelationId: r.Correlation,
		TenantId:      r.Tenant,
		SessionId:     r.Session,
		UserId:        r.User,
		Source:        r.Source,
		Target:        AgentArchivalist,
		Type:          messagev1.MessageType_MESSAGE_TYPE_STORE_REQUEST,
		CreatedAt:     timestamppb.Now(),
		Attempt:       1,
		Priority:      messagev1.Priority_PRIORITY_KNOWLEDGE,
		Repository:    r.Repository,
		Payload: &messagev1.Envelope_StoreRequest{StoreRequest: &messagev1.StoreRequest{
			Source: r.Source, Category: r.Category, Title: r.Title, Content: r.Text}},
	}
}
