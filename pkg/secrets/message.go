package secrets

import (
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// ScrubMessage redacts, in place, every string field of m and of the
// messages it holds (lists and map values included), except the fields
// named in keep (full names, e.g. "sylk.task.v1.TaskResult.patch"), and
// says how many secrets it replaced. A nil message is left alone.
func ScrubMessage(m proto.Message, keep ...protoreflect.FullName) int {
	if m == nil || !m.ProtoReflect().IsValid() {
		return 0
	}
	return scrubMessage(m.ProtoReflect(), keep)
}

func scrubMessage(m protoreflect.Message, keep []protoreflect.FullName) int {
	n := 0
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		for _, k := range keep {
			if fd.FullName() == k {
				return true
			}
		}
		switch {
		case fd.IsList():
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				if fd.Kind() == protoreflect.StringKind {
					if s, c := Redact(l.Get(i).String()); c > 0 {
						l.Set(i, protoreflect.ValueOfString(s))
						n += c
					}
				} else if fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind {
					n += scrubMessage(l.Get(i).Message(), keep)
				}
			}
		case fd.IsMap():
			mp := v.Map()
			vd := fd.MapValue()
			mp.Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				if vd.Kind() == protoreflect.StringKind {
					if s, c := Redact(mv.String()); c > 0 {
						mp.Set(k, protoreflect.ValueOfString(s))
						n += c
					}
				} else if vd.Kind() == protoreflect.MessageKind {
					n += scrubMessage(mv.Message(), keep)
				}
				return true
			})
		case fd.Kind() == protoreflect.StringKind:
			if s, c := Redact(v.String()); c > 0 {
				m.Set(fd, protoreflect.ValueOfString(s))
				n += c
			}
		case fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind:
			n += scrubMessage(v.Message(), keep)
		}
		return true
	})
	return n
}
