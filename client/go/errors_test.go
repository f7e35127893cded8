package opreg_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	opreg "github.com/opreg/opreg/client/go"
	opregv1 "github.com/opreg/opreg/client/go/gen/opreg/v1"
)

// The gRPC code each reason travels with (errors.proto).
var codeOfReason = map[opregv1.ErrorReason]codes.Code{
	opregv1.ErrorReason_ERROR_REASON_INVALID_ARGUMENT:         codes.InvalidArgument,
	opregv1.ErrorReason_ERROR_REASON_MESSAGE_TOO_LARGE:        codes.ResourceExhausted,
	opregv1.ErrorReason_ERROR_REASON_PARAMETER_CONFLICT:       codes.AlreadyExists,
	opregv1.ErrorReason_ERROR_REASON_STALE_FENCING_TOKEN:      codes.Aborted,
	opregv1.ErrorReason_ERROR_REASON_ALREADY_COMPLETED:        codes.FailedPrecondition,
	opregv1.ErrorReason_ERROR_REASON_LEASE_NOT_HELD:           codes.FailedPrecondition,
	opregv1.ErrorReason_ERROR_REASON_ORIGINAL_OUTCOME_UNKNOWN: codes.FailedPrecondition,
	opregv1.ErrorReason_ERROR_REASON_NOTHING_TO_COMPENSATE:    codes.FailedPrecondition,
	opregv1.ErrorReason_ERROR_REASON_ALREADY_COMPENSATED:      codes.FailedPrecondition,
	opregv1.ErrorReason_ERROR_REASON_INVALID_TRANSITION:       codes.FailedPrecondition,
	opregv1.ErrorReason_ERROR_REASON_UNAUTHENTICATED:          codes.Unauthenticated,
	opregv1.ErrorReason_ERROR_REASON_PERMISSION_DENIED:        codes.PermissionDenied,
	opregv1.ErrorReason_ERROR_REASON_OPERATION_NOT_FOUND:      codes.NotFound,
	opregv1.ErrorReason_ERROR_REASON_RESOURCE_NOT_FOUND:       codes.NotFound,
	opregv1.ErrorReason_ERROR_REASON_STORE_UNAVAILABLE:        codes.Unavailable,
	opregv1.ErrorReason_ERROR_REASON_OPERATION_BUSY:           codes.Unavailable,
	opregv1.ErrorReason_ERROR_REASON_OVERLOADED:               codes.Unavailable,
	opregv1.ErrorReason_ERROR_REASON_RATE_LIMITED:             codes.ResourceExhausted,
	opregv1.ErrorReason_ERROR_REASON_DEADLINE_EXCEEDED:        codes.DeadlineExceeded,
	opregv1.ErrorReason_ERROR_REASON_INTERNAL:                 codes.Internal,
	opregv1.ErrorReason_ERROR_REASON_OPERATION_EXISTS:         codes.AlreadyExists,
	opregv1.ErrorReason_ERROR_REASON_TOO_MANY_WAITERS:         codes.ResourceExhausted,
}

// The transient reasons (PROTOCOL.md, "Transient errors").
var transientReasons = map[opregv1.ErrorReason]bool{
	opregv1.ErrorReason_ERROR_REASON_STORE_UNAVAILABLE: true,
	opregv1.ErrorReason_ERROR_REASON_OPERATION_BUSY:    true,
	opregv1.ErrorReason_ERROR_REASON_OVERLOADED:        true,
	opregv1.ErrorReason_ERROR_REASON_RATE_LIMITED:      true,
	opregv1.ErrorReason_ERROR_REASON_DEADLINE_EXCEEDED: true,
	opregv1.ErrorReason_ERROR_REASON_TOO_MANY_WAITERS:  true,
}

func opregStatus(code codes.Code, reason string, metadata map[string]string, extra ...*errdetails.RetryInfo) error {
	st := status.New(code, "refused for the test")
	details := []any{}
	if reason != "" {
		details = append(details, &errdetails.ErrorInfo{Reason: reason, Domain: opreg.ErrorDomain, Metadata: metadata})
	}
	for _, e := range extra {
		details = append(details, e)
	}
	withDetails, err := st.WithDetails(toProtoMessages(details)...)
	if err != nil {
		panic(err)
	}
	return withDetails.Err()
}

// Every ErrorReason maps to a typed error (not the bare *RPCError): a reason
// added to errors.proto without a mapping fails here.
func TestEveryErrorReasonHasATypedError(t *testing.T) {
	for value, name := range opregv1.ErrorReason_name {
		reason := opregv1.ErrorReason(value)
		if reason == opregv1.ErrorReason_ERROR_REASON_UNSPECIFIED {
			continue
		}
		code, ok := codeOfReason[reason]
		if !ok {
			t.Errorf("%s: no gRPC code in this test's table", name)
			code = codes.Unknown
		}
		wire := opreg.ReasonName(reason)
		if "ERROR_REASON_"+wire != name || opreg.ParseReason(wire) != reason {
			t.Errorf("%s: travels as %q, parsed back as %v", name, wire, opreg.ParseReason(wire))
		}
		err := opreg.FromError(opregStatus(code, wire, nil))
		if _, bare := err.(*opreg.RPCError); bare {
			t.Errorf("%s: no typed error (FromError returned the bare *RPCError)", name)
		}
		var rpc *opreg.RPCError
		if !errors.As(err, &rpc) || rpc.Reason != reason || rpc.Code != code {
			t.Errorf("%s: errors.As(*RPCError) = %v (%+v)", name, errors.As(err, &rpc), rpc)
			continue
		}
		if got := opreg.IsTransient(err); got != transientReasons[reason] {
			t.Errorf("%s: IsTransient = %v", name, got)
		}
		if status.Code(err) != code {
			t.Errorf("%s: status.Code = %v", name, status.Code(err))
		}
	}
}

// Every ErrorMetadataKey is read by a typed error's accessor; a key added to
// errors.proto without one fails here.
func TestEveryMetadataKeyHasAnAccessor(t *testing.T) {
	type check struct {
		reason opregv1.ErrorReason
		value  string
		read   func(error) string
	}
	as := func(err error, target any) {
		if !errors.As(err, target) {
			panic(fmt.Sprintf("%T is not %T", err, target))
		}
	}
	checks := map[opregv1.ErrorMetadataKey]check{
		opregv1.ErrorMetadataKey_ERROR_METADATA_KEY_LIMIT: {opregv1.ErrorReason_ERROR_REASON_MESSAGE_TOO_LARGE, "4194304", func(err error) string {
			var e *opreg.MessageTooLargeError
			as(err, &e)
			n, _ := e.Limit()
			return fmt.Sprint(n)
		}},
		opregv1.ErrorMetadataKey_ERROR_METADATA_KEY_STORED_DIGEST: {opregv1.ErrorReason_ERROR_REASON_PARAMETER_CONFLICT, "00ff", func(err error) string {
			var e *opreg.ParameterConflictError
			as(err, &e)
			return fmt.Sprintf("%x", e.StoredDigest())
		}},
		opregv1.ErrorMetadataKey_ERROR_METADATA_KEY_REQUEST_DIGEST: {opregv1.ErrorReason_ERROR_REASON_PARAMETER_CONFLICT, "ab12", func(err error) string {
			var e *opreg.ParameterConflictError
			as(err, &e)
			return fmt.Sprintf("%x", e.RequestDigest())
		}},
		opregv1.ErrorMetadataKey_ERROR_METADATA_KEY_DIFFERING_FIELDS: {opregv1.ErrorReason_ERROR_REASON_PARAMETER_CONFLICT, "amount,payee", func(err error) string {
			var e *opreg.ParameterConflictError
			as(err, &e)
			return fmt.Sprint(e.DifferingFields()[0], ",", e.DifferingFields()[1])
		}},
		opregv1.ErrorMetadataKey_ERROR_METADATA_KEY_DIFFERING_FIELDS_TRUNCATED: {opregv1.ErrorReason_ERROR_REASON_PARAMETER_CONFLICT, "true", func(err error) string {
			var e *opreg.ParameterConflictError
			as(err, &e)
			return fmt.Sprint(e.DifferingFieldsTruncated())
		}},
		opregv1.ErrorMetadataKey_ERROR_METADATA_KEY_CONFLICTING_FIELD: {opregv1.ErrorReason_ERROR_REASON_PARAMETER_CONFLICT, "compensates", func(err error) string {
			var e *opreg.ParameterConflictError
			as(err, &e)
			return e.ConflictingField()
		}},
		opregv1.ErrorMetadataKey_ERROR_METADATA_KEY_PRESENTED_TOKEN: {opregv1.ErrorReason_ERROR_REASON_STALE_FENCING_TOKEN, "7", func(err error) string {
			var e *opreg.StaleFencingTokenError
			as(err, &e)
			n, _ := e.PresentedToken()
			return fmt.Sprint(n)
		}},
		opregv1.ErrorMetadataKey_ERROR_METADATA_KEY_CURRENT_TOKEN: {opregv1.ErrorReason_ERROR_REASON_STALE_FENCING_TOKEN, "9", func(err error) string {
			var e *opreg.StaleFencingTokenError
			as(err, &e)
			n, _ := e.CurrentToken()
			return fmt.Sprint(n)
		}},
		opregv1.ErrorMetadataKey_ERROR_METADATA_KEY_FENCING_TOKEN: {opregv1.ErrorReason_ERROR_REASON_ALREADY_COMPLETED, "3", func(err error) string {
			var e *opreg.AlreadyCompletedError
			as(err, &e)
			n, _ := e.FencingToken()
			return fmt.Sprint(n)
		}},
		opregv1.ErrorMetadataKey_ERROR_METADATA_KEY_COMPENSATED_BY: {opregv1.ErrorReason_ERROR_REASON_ALREADY_COMPENSATED, "refund:1", func(err error) string {
			var e *opreg.AlreadyCompensatedError
			as(err, &e)
			return e.CompensatedBy()
		}},
		opregv1.ErrorMetadataKey_ERROR_METADATA_KEY_CURRENT_STATUS: {opregv1.ErrorReason_ERROR_REASON_INVALID_TRANSITION, "OPERATION_STATUS_SUCCEEDED", func(err error) string {
			var e *opreg.InvalidTransitionError
			as(err, &e)
			s, _ := e.CurrentStatus()
			return s.String()
		}},
		opregv1.ErrorMetadataKey_ERROR_METADATA_KEY_HELD: {opregv1.ErrorReason_ERROR_REASON_INVALID_TRANSITION, "true", func(err error) string {
			var e *opreg.InvalidTransitionError
			as(err, &e)
			held, _ := e.Held()
			return fmt.Sprint(held)
		}},
		opregv1.ErrorMetadataKey_ERROR_METADATA_KEY_PRINCIPAL: {opregv1.ErrorReason_ERROR_REASON_PERMISSION_DENIED, "py-reader", func(err error) string {
			var e *opreg.PermissionDeniedError
			as(err, &e)
			return e.Principal()
		}},
		opregv1.ErrorMetadataKey_ERROR_METADATA_KEY_NAMESPACE: {opregv1.ErrorReason_ERROR_REASON_PERMISSION_DENIED, "billing", func(err error) string {
			var e *opreg.PermissionDeniedError
			as(err, &e)
			return e.Namespace()
		}},
		opregv1.ErrorMetadataKey_ERROR_METADATA_KEY_ROLE: {opregv1.ErrorReason_ERROR_REASON_PERMISSION_DENIED, "worker", func(err error) string {
			var e *opreg.PermissionDeniedError
			as(err, &e)
			return e.Role()
		}},
		opregv1.ErrorMetadataKey_ERROR_METADATA_KEY_CALLS_PER_SECOND: {opregv1.ErrorReason_ERROR_REASON_RATE_LIMITED, "50", func(err error) string {
			var e *opreg.RateLimitedError
			as(err, &e)
			n, _ := e.CallsPerSecond()
			return fmt.Sprint(n)
		}},
	}
	for value, name := range opregv1.ErrorMetadataKey_name {
		key := opregv1.ErrorMetadataKey(value)
		if key == opregv1.ErrorMetadataKey_ERROR_METADATA_KEY_UNSPECIFIED {
			continue
		}
		c, ok := checks[key]
		if !ok {
			t.Errorf("%s (%q): no accessor in this test's table", name, opreg.MetadataKey(key))
			continue
		}
		err := opreg.FromError(opregStatus(codeOfReason[c.reason], opreg.ReasonName(c.reason), map[string]string{opreg.MetadataKey(key): c.value}))
		if got := c.read(err); got != c.value && !(key == opregv1.ErrorMetadataKey_ERROR_METADATA_KEY_DIFFERING_FIELDS && got == "amount,payee") {
			t.Errorf("%s: read %q, sent %q", name, got, c.value)
		}
	}
}

func TestMetadataKeyNames(t *testing.T) {
	for key, want := range map[opregv1.ErrorMetadataKey]string{
		opregv1.ErrorMetadataKey_ERROR_METADATA_KEY_STORED_DIGEST:              "storedDigest",
		opregv1.ErrorMetadataKey_ERROR_METADATA_KEY_LIMIT:                      "limit",
		opregv1.ErrorMetadataKey_ERROR_METADATA_KEY_DIFFERING_FIELDS_TRUNCATED: "differingFieldsTruncated",
		opregv1.ErrorMetadataKey_ERROR_METADATA_KEY_CALLS_PER_SECOND:           "callsPerSecond",
	} {
		if got := opreg.MetadataKey(key); got != want {
			t.Errorf("MetadataKey(%v) = %q, want %q", key, got, want)
		}
	}
}

func TestTransientErrors(t *testing.T) {
	retry := &errdetails.RetryInfo{RetryDelay: durationpb.New(250 * time.Millisecond)}
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"transport UNAVAILABLE", status.Error(codes.Unavailable, "connection refused"), true},
		{"DEADLINE_EXCEEDED", status.Error(codes.DeadlineExceeded, "deadline"), true},
		{"the server's Timeout expired", status.Error(codes.Canceled, "Timeout expired"), true},
		{"a CANCELLED the caller caused", status.Error(codes.Canceled, "context canceled"), false},
		{"RATE_LIMITED", opregStatus(codes.ResourceExhausted, "RATE_LIMITED", nil, retry), true},
		{"TOO_MANY_WAITERS", opregStatus(codes.ResourceExhausted, "TOO_MANY_WAITERS", map[string]string{"limit": "10000"}, retry), true},
		{"OPERATION_EXISTS", opregStatus(codes.AlreadyExists, "OPERATION_EXISTS", map[string]string{"currentStatus": "IN_PROGRESS"}), false},
		{"MESSAGE_TOO_LARGE", opregStatus(codes.ResourceExhausted, "MESSAGE_TOO_LARGE", nil), false},
		{"RESOURCE_EXHAUSTED without a reason", status.Error(codes.ResourceExhausted, "grpc limit"), false},
		{"OPERATION_BUSY", opregStatus(codes.Unavailable, "OPERATION_BUSY", nil, retry), true},
		{"PERMISSION_DENIED", opregStatus(codes.PermissionDenied, "PERMISSION_DENIED", nil), false},
		{"a reason newer than this client", opregStatus(codes.Unavailable, "SOMETHING_NEW", nil), true},
		{"context.DeadlineExceeded", context.DeadlineExceeded, true},
	}
	for _, c := range cases {
		err := opreg.FromError(c.err)
		if got := opreg.IsTransient(err); got != c.want {
			t.Errorf("%s: IsTransient = %v, want %v (%v)", c.name, got, c.want, err)
		}
	}
	var rate *opreg.RateLimitedError
	if err := opreg.FromError(cases[4].err); !errors.As(err, &rate) || rate.RetryDelay != 250*time.Millisecond {
		t.Errorf("RATE_LIMITED: %T, retry delay %v", err, rate)
	}
	var waiters *opreg.TooManyWaitersError
	if err := opreg.FromError(cases[5].err); !errors.As(err, &waiters) || waiters.RetryDelay != 250*time.Millisecond {
		t.Errorf("TOO_MANY_WAITERS: %T, retry delay %v", err, waiters)
	} else if limit, ok := waiters.Limit(); !ok || limit != 10000 {
		t.Errorf("TOO_MANY_WAITERS: Limit() = %v, %v", limit, ok)
	}
	var exists *opreg.OperationExistsError
	if err := opreg.FromError(cases[6].err); !errors.As(err, &exists) {
		t.Errorf("OPERATION_EXISTS: %T", err)
	} else if current, ok := exists.CurrentStatus(); !ok || current != opregv1.OperationStatus_OPERATION_STATUS_IN_PROGRESS {
		t.Errorf("OPERATION_EXISTS: CurrentStatus() = %v, %v", current, ok)
	}
	var unknownReason *opreg.UnavailableError
	if err := opreg.FromError(cases[11].err); !errors.As(err, &unknownReason) || unknownReason.ReasonText != "SOMETHING_NEW" {
		t.Errorf("an unknown reason is typed by its code: %T", err)
	}
}

func TestErrorsFromOtherDomainsCarryNoReason(t *testing.T) {
	st, _ := status.New(codes.NotFound, "elsewhere").WithDetails(&errdetails.ErrorInfo{Reason: "OPERATION_NOT_FOUND", Domain: "example.com"})
	err := opreg.FromError(st.Err())
	var rpc *opreg.RPCError
	if !errors.As(err, &rpc) || rpc.Reason != opregv1.ErrorReason_ERROR_REASON_UNSPECIFIED || !opreg.IsNotFound(err) {
		t.Errorf("got %T %+v", err, rpc)
	}
	if opreg.FromError(nil) != nil {
		t.Error("FromError(nil) is not nil")
	}
	plain := errors.New("not an RPC error")
	if opreg.FromError(plain) != plain {
		t.Error("a plain error is not returned as it is")
	}
}

func TestBadRequestFieldViolations(t *testing.T) {
	st, _ := status.New(codes.InvalidArgument, "bad").WithDetails(
		&errdetails.ErrorInfo{Reason: "INVALID_ARGUMENT", Domain: opreg.ErrorDomain},
		&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "owner", Description: "required"}}},
	)
	var invalid *opreg.InvalidArgumentError
	if err := opreg.FromError(st.Err()); !errors.As(err, &invalid) || len(invalid.FieldViolations) != 1 || invalid.FieldViolations[0].Field != "owner" {
		t.Errorf("got %T %+v", err, invalid)
	}
}
