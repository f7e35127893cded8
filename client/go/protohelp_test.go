package opreg_test

import "google.golang.org/protobuf/protoadapt"

func toProtoMessages(details []any) []protoadapt.MessageV1 {
	out := make([]protoadapt.MessageV1, 0, len(details))
	for _, d := range details {
		out = append(out, protoadapt.MessageV1Of(d.(protoadapt.MessageV2)))
	}
	return out
}
