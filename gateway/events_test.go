package gateway

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	"sylk.dev/sylk/pkg/topology"
)

// everyEvent is an event of every type, each with its payload's every
// field set (nested messages a few levels deep), in sequence order.
func everyEvent() []*eventv1.Event {
	var out []*eventv1.Event
	values := eventv1.EventType(0).Descriptor().Values()
	for i := range values.Len() {
		t := eventv1.EventType(values.Get(i).Number())
		if t == eventv1.EventType_EVENT_TYPE_UNSPECIFIED {
			continue
		}
		ev := &eventv1.Event{Sequence: uint64(i), SessionId: "all", Type: t, Source: "guide", Text: t.String()}
		m := ev.ProtoReflect()
		fd := m.Descriptor().Fields().ByName(topology.EventPayload(t))
		payload := m.NewField(fd).Message()
		fill(payload, 3)
		m.Set(fd, protoreflect.ValueOfMessage(payload))
		out = append(out, ev)
	}
	return out
}

// fill sets every field of m (the first of each oneof), recursing depth
// levels into messages.
func fill(m protoreflect.Message, depth int) {
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if o := fd.ContainingOneof(); o != nil && o.Fields().Get(0) != fd {
			continue
		}
		switch {
		case fd.IsList():
			if v, ok := sample(m.NewField(fd).List().NewElement(), fd, depth); ok {
				l := m.Mutable(fd).List()
				l.Append(v)
			}
		case fd.IsMap():
			k, _ := sample(protoreflect.Value{}, fd.MapKey(), 0)
			if v, ok := sample(m.NewField(fd).Map().NewValue(), fd.MapValue(), depth); ok {
				m.Mutable(fd).Map().Set(k.MapKey(), v)
			}
		default:
			if v, ok := sample(m.NewField(fd), fd, depth); ok {
				m.Set(fd, v)
			}
		}
	}
}

// sample is a value of fd's kind that is not its zero value; empty is a
// new value of fd (a message to fill).
func sample(empty protoreflect.Value, fd protoreflect.FieldDescriptor, depth int) (protoreflect.Value, bool) {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return protoreflect.ValueOfString("x"), true
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte("x")), true
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true), true
	case protoreflect.EnumKind:
		vals := fd.Enum().Values()
		return protoreflect.ValueOfEnum(vals.Get(vals.Len() - 1).Number()), true
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(3), true
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(3), true
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(3), true
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(3), true
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(0.5), true
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(0.5), true
	case protoreflect.MessageKind:
		if depth == 0 {
			return protoreflect.Value{}, false
		}
		fill(empty.Message(), depth-1)
		return empty, true
	}
	return protoreflect.Value{}, false
}

// TestEveryEventKindDecodes: every event type, with its payload, reaches a
// client as the proto's JSON (field names of the proto, the type as its
// enum name and the one payload field) in a page, in newline-delimited
// JSON and in server-sent events, and decodes into the typed message it
// was.
func TestEveryEventKindDecodes(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	want := everyEvent()
	for _, ev := range want {
		require.NoError(t, topology.CheckEvent(ev), "every type has its payload")
	}
	decode := func(t *testing.T, raw json.RawMessage) *eventv1.Event {
		t.Helper()
		var fields map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(raw, &fields))
		var ev eventv1.Event
		require.NoError(t, protojson.Unmarshal(raw, &ev), "%s", raw)
		payload := ev.ProtoReflect().WhichOneof(ev.ProtoReflect().Descriptor().Oneofs().ByName("payload"))
		require.NotNil(t, payload)
		require.Contains(t, fields, payload.JSONName(), "the payload under its JSON name")
		require.JSONEq(t, strconv.Quote(ev.GetType().String()), string(fields["type"]))
		return &ev
	}
	requireSame := func(t *testing.T, got []*eventv1.Event) {
		t.Helper()
		require.Len(t, got, len(want))
		for i := range want {
			require.True(t, proto.Equal(want[i], got[i]), "%v:\nwant %v\ngot  %v", want[i].GetType(), want[i], got[i])
		}
	}

	t.Run("page", func(t *testing.T) {
		t.Parallel()
		r := h.do(t, http.MethodGet, "/v1/sessions/all/events", "", bearer(h.viewer))
		require.Equal(t, http.StatusOK, r.code, r.body)
		var page struct {
			Events []json.RawMessage `json:"events"`
		}
		require.NoError(t, json.Unmarshal([]byte(r.body), &page))
		var got []*eventv1.Event
		for _, raw := range page.Events {
			got = append(got, decode(t, raw))
		}
		requireSame(t, got)
	})
	t.Run("newline-delimited JSON", func(t *testing.T) {
		t.Parallel()
		r := h.do(t, http.MethodGet, "/v1/sessions/all/events:stream", "", bearer(h.viewer))
		require.Equal(t, http.StatusOK, r.code, r.body)
		var got []*eventv1.Event
		for line := range strings.Lines(r.body) {
			var msg struct {
				Result struct {
					Event json.RawMessage `json:"event"`
				} `json:"result"`
			}
			require.NoError(t, json.Unmarshal([]byte(line), &msg), line)
			got = append(got, decode(t, msg.Result.Event))
		}
		requireSame(t, got)
	})
	t.Run("server-sent events", func(t *testing.T) {
		t.Parallel()
		r := h.do(t, http.MethodGet, "/v1/sessions/all/events:stream?format=sse", "", bearer(h.viewer))
		require.Equal(t, http.StatusOK, r.code, r.body)
		var got []*eventv1.Event
		var id, typ string
		sc := bufio.NewScanner(strings.NewReader(r.body))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			k, v, _ := strings.Cut(sc.Text(), ": ")
			switch k {
			case "id":
				id = v
			case "event":
				typ = v
			case "data":
				ev := decode(t, json.RawMessage(v))
				require.Equal(t, strconv.FormatUint(ev.GetSequence(), 10), id, "the id is the sequence")
				require.Equal(t, ev.GetType().String(), typ, "the event is the type")
				got = append(got, ev)
			}
		}
		require.NoError(t, sc.Err())
		requireSame(t, got)
	})
}
