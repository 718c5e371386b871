package orchestrator

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	taskv1 "sylk.dev/sylk/gen/go/sylk/task/v1"
)

// A dispatch carries a stored node's encoding as it is: the message decodes
// to the same node as one with the node set.
func TestDispatchCarriesTheStoredNode(t *testing.T) {
	t.Parallel()
	require.Equal(t, protoreflect.FieldNumber(dispatchNodeField),
		(&taskv1.TaskDispatch{}).ProtoReflect().Descriptor().Fields().ByName("node").Number())
	spec := &orchestratorv1.Node{Id: "a", Command: "echo a", DependsOn: []string{"b"}}
	encoded, err := proto.Marshal(spec)
	require.NoError(t, err)
	for _, tt := range []struct {
		name    string
		encoded []byte
	}{{"stored encoding", encoded}, {"marshalled", nil}} {
		d := &taskv1.TaskDispatch{RunId: "r", NodeId: "a", Attempt: 1}
		setNode(d, spec, tt.encoded)
		raw, err := proto.Marshal(d)
		require.NoError(t, err, tt.name)
		var got taskv1.TaskDispatch
		require.NoError(t, proto.Unmarshal(raw, &got), tt.name)
		require.True(t, proto.Equal(spec, got.GetNode()), "%s: %v", tt.name, got.GetNode())
		require.Equal(t, "r", got.GetRunId(), tt.name)
	}
}
