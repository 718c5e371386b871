package guide

import (
	"context"

	"google.golang.org/protobuf/types/known/timestamppb"

	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
	"sylk.dev/sylk/pkg/apierr"
)

func (m message) proto() *guidev1.Message {
	return &guidev1.Message{
		Name:          messageName(m.SessionID, m.ID),
		Id:            m.ID,
		Text:          m.Text,
		Author:        m.Author,
		CreateTime:    timestamppb.New(m.CreateTime),
		CorrelationId: m.CorrelationID,
	}
}

func (m message) response() *guidev1.SendMessageResponse {
	return &guidev1.SendMessageResponse{
		Message:       m.proto(),
		Route:         m.Route.proto(),
		Reply:         m.Reply,
		CorrelationId: m.CorrelationID,
	}
}

// replyMessage is the Guide's reply to m, stored with it.
func (s *Service) replyMessage(m message) message {
	return message{
		ID:            *m.ReplyID,
		SessionID:     m.SessionID,
		Author:        authorGuide,
		Text:          m.Reply,
		CorrelationID: m.CorrelationID,
		CreateTime:    s.now(),
	}
}

// ListMessages returns a session's messages, oldest first.
func (s *Service) ListMessages(ctx context.Context, req *guidev1.ListMessagesRequest) (*guidev1.ListMessagesResponse, error) {
	who, sid, err := callerSession(ctx, "parent", req.GetParent())
	if err != nil {
		return nil, err
	}
	size, err := pageSize(req.GetPageSize(), defaultMessagePageSize, maxMessagePageSize)
	if err != nil {
		return nil, err
	}
	var after *messageCursor
	if tok := req.GetPageToken(); tok != "" {
		t, id, err := decodeCursor(tok)
		if err != nil {
			return nil, err
		}
		after = &messageCursor{CreateTime: t, ID: id}
	}
	o := ownerOf(who)
	if _, err := getSession(ctx, s.db, o, sid, false); err != nil {
		return nil, apierr.Status(ctx, s.log, "list messages", err)
	}
	rows, err := listMessages(ctx, s.db, o, sid, after, size+1)
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "list messages", err)
	}
	resp := &guidev1.ListMessagesResponse{}
	if len(rows) > size {
		rows = rows[:size]
		last := rows[len(rows)-1]
		resp.NextPageToken = encodeCursor(last.CreateTime, last.ID)
	}
	for _, m := range rows {
		resp.Messages = append(resp.Messages, m.proto())
	}
	return resp, nil
}
