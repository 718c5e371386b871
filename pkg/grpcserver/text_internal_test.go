package grpcserver

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
	"sylk.dev/sylk/pkg/apierr"
)

func TestCheckTextRefusesNUL(t *testing.T) {
	t.Parallel()
	nested, err := structpb.NewStruct(map[string]any{"ok": "fine", "list": []any{"a", map[string]any{"deep": "x\x00y"}}})
	require.NoError(t, err)
	for _, tc := range []struct {
		req  any
		path string
	}{
		{&guidev1.CreateSessionRequest{Session: &guidev1.Session{DisplayName: "a\x00b"}}, "session.displayName"},
		{&guidev1.CreateSessionRequest{Session: &guidev1.Session{Metadata: map[string]string{"k": "v\x00"}}}, `session.metadata["k"]`},
		{&guidev1.CreateSessionRequest{Session: &guidev1.Session{Metadata: map[string]string{"k\x00": "v"}}}, "session.metadata"},
		{nested, `fields["list"].listValue.values[1].structValue.fields["deep"].stringValue`},
	} {
		err := checkText(tc.req)
		require.Equal(t, codes.InvalidArgument, status.Code(err), tc.path)
		require.Equal(t, tc.path+": must not contain NUL", status.Convert(err).Message())
		require.Equal(t, tc.path, apierr.Info(status.Convert(err)).GetMetadata()["field"])
	}
	clean, err := structpb.NewStruct(map[string]any{"ok": "fine", "n": 1.0})
	require.NoError(t, err)
	require.NoError(t, checkText(clean))
	require.NoError(t, checkText(&guidev1.CreateSessionRequest{Session: &guidev1.Session{DisplayName: "héllo", Metadata: map[string]string{"a": "b"}}}))
	require.NoError(t, checkText("not a message"))
}
