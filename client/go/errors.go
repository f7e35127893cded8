package opreg

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	opregv1 "github.com/opreg/opreg/client/go/gen/opreg/v1"
)

// ErrorDomain is the google.rpc.ErrorInfo domain of opreg's errors.
const ErrorDomain = "opreg"

// serverTimeoutMessage is what a server's own timer answers (CANCELLED) when
// the caller's deadline passed inside it: a deadline, not a cancellation.
const serverTimeoutMessage = "Timeout expired"

// ReasonName is the ErrorInfo.reason string of an ErrorReason:
// ERROR_REASON_PARAMETER_CONFLICT travels as "PARAMETER_CONFLICT".
func ReasonName(reason opregv1.ErrorReason) string {
	return strings.TrimPrefix(reason.String(), "ERROR_REASON_")
}

// ParseReason is the ErrorReason an ErrorInfo.reason names; UNSPECIFIED for
// the empty reason and for one this client does not know.
func ParseReason(text string) opregv1.ErrorReason {
	if text == "" {
		return opregv1.ErrorReason_ERROR_REASON_UNSPECIFIED
	}
	if value, ok := opregv1.ErrorReason_value["ERROR_REASON_"+text]; ok {
		return opregv1.ErrorReason(value)
	}
	return opregv1.ErrorReason_ERROR_REASON_UNSPECIFIED
}

// MetadataKey is the ErrorInfo.metadata key of an ErrorMetadataKey: its name
// without ERROR_METADATA_KEY_, in lowerCamelCase (ERROR_METADATA_KEY_STORED_DIGEST
// travels as "storedDigest").
func MetadataKey(key opregv1.ErrorMetadataKey) string {
	words := strings.Split(strings.ToLower(strings.TrimPrefix(key.String(), "ERROR_METADATA_KEY_")), "_")
	for i := 1; i < len(words); i++ {
		if words[i] != "" {
			words[i] = strings.ToUpper(words[i][:1]) + words[i][1:]
		}
	}
	return strings.Join(words, "")
}

// RPCError is a failed call, decoded from its gRPC status and the one
// google.rpc.ErrorInfo (domain "opreg") it carries. Every error a [Client]
// method returns for a failed call is an *RPCError or one of the typed errors
// below, which embed it (errors.As works for both).
type RPCError struct {
	// Code is the gRPC status code.
	Code codes.Code
	// Reason is the ErrorInfo reason; UNSPECIFIED when the status carried none
	// (a transport failure, say) or one this client does not know.
	Reason opregv1.ErrorReason
	// ReasonText is the reason as it travelled ("" when none).
	ReasonText string
	// Message is the status message.
	Message string
	// Metadata is the ErrorInfo metadata (see [MetadataKey]).
	Metadata map[string]string
	// RetryDelay is the google.rpc.RetryInfo delay the server asked for (0: none).
	RetryDelay time.Duration
	// FieldViolations come from a google.rpc.BadRequest (INVALID_ARGUMENT).
	FieldViolations []FieldViolation
	status          *status.Status
}

// FieldViolation names one invalid request field (google.rpc.BadRequest).
type FieldViolation struct {
	Field       string
	Description string
}

func (e *RPCError) Error() string {
	label := e.ReasonText
	if label == "" {
		label = e.Code.String()
	}
	return fmt.Sprintf("opreg: %s: %s", label, e.Message)
}

// GRPCStatus makes status.FromError and status.Code work on the error.
func (e *RPCError) GRPCStatus() *status.Status { return e.status }

// Meta is the value of an ErrorInfo metadata key ("" when absent).
func (e *RPCError) Meta(key opregv1.ErrorMetadataKey) string {
	return e.Metadata[MetadataKey(key)]
}

// Transient reports whether the helpers retry the error: UNAVAILABLE (the
// transport, STORE_UNAVAILABLE, OPERATION_BUSY, OVERLOADED), DEADLINE_EXCEEDED,
// the CANCELLED "Timeout expired" a server's own timer answers, and
// RESOURCE_EXHAUSTED with reason RATE_LIMITED or TOO_MANY_WAITERS (not
// MESSAGE_TOO_LARGE).
func (e *RPCError) Transient() bool {
	switch e.Code {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	case codes.Canceled:
		return e.Message == serverTimeoutMessage
	case codes.ResourceExhausted:
		return e.Reason == opregv1.ErrorReason_ERROR_REASON_RATE_LIMITED ||
			e.Reason == opregv1.ErrorReason_ERROR_REASON_TOO_MANY_WAITERS
	}
	return false
}

// IsTransient reports whether err is (or wraps) a transient RPC error (see
// [RPCError.Transient]): the only errors the helpers retry.
func IsTransient(err error) bool {
	var rpc *RPCError
	return errors.As(err, &rpc) && rpc.Transient()
}

// The typed errors, one per ErrorReason (see [FromError]). Each embeds the
// *RPCError and unwraps to it.
type (
	// InvalidArgumentError: INVALID_ARGUMENT; FieldViolations name the fields.
	InvalidArgumentError struct{ *RPCError }
	// MessageTooLargeError: RESOURCE_EXHAUSTED/MESSAGE_TOO_LARGE. Not transient:
	// the same request is refused again.
	MessageTooLargeError struct{ *RPCError }
	// ParameterConflictError: ALREADY_EXISTS/PARAMETER_CONFLICT: the key is
	// registered with other parameters (or another compensates). Never retry it.
	ParameterConflictError struct{ *RPCError }
	// OperationExistsError: ALREADY_EXISTS/OPERATION_EXISTS: a Claim with
	// REUSE_POLICY_REJECT_EXISTING found the key registered. Not transient.
	OperationExistsError struct{ *RPCError }
	// StaleFencingTokenError: ABORTED/STALE_FENCING_TOKEN: another execution
	// holds a newer token. Stop writing.
	StaleFencingTokenError struct{ *RPCError }
	// AlreadyCompletedError: FAILED_PRECONDITION/ALREADY_COMPLETED: this token
	// already reported another outcome.
	AlreadyCompletedError struct{ *RPCError }
	// LeaseNotHeldError: FAILED_PRECONDITION/LEASE_NOT_HELD: the caller's lease
	// is not the operation's current one.
	LeaseNotHeldError struct{ *RPCError }
	// OriginalOutcomeUnknownError: a compensation refused: the original's
	// outcome is unknown; reconcile it first.
	OriginalOutcomeUnknownError struct{ *RPCError }
	// NothingToCompensateError: a compensation refused: the original did not succeed.
	NothingToCompensateError struct{ *RPCError }
	// AlreadyCompensatedError: a compensation refused: another operation
	// compensates the original.
	AlreadyCompensatedError struct{ *RPCError }
	// InvalidTransitionError: FAILED_PRECONDITION/INVALID_TRANSITION: an
	// OperationAdmin action the operation's status does not allow.
	InvalidTransitionError struct{ *RPCError }
	// UnauthenticatedError: UNAUTHENTICATED: no credentials the server's policy knows.
	UnauthenticatedError struct{ *RPCError }
	// PermissionDeniedError: PERMISSION_DENIED: the principal lacks the role.
	PermissionDeniedError struct{ *RPCError }
	// OperationNotFoundError: NOT_FOUND/OPERATION_NOT_FOUND.
	OperationNotFoundError struct{ *RPCError }
	// ResourceNotFoundError: NOT_FOUND/RESOURCE_NOT_FOUND (a fenced resource).
	ResourceNotFoundError struct{ *RPCError }
	// UnavailableError: UNAVAILABLE (STORE_UNAVAILABLE, OVERLOADED, or the
	// transport), or a deadline that passed (DEADLINE_EXCEEDED, the server's
	// CANCELLED "Timeout expired"). Transient.
	UnavailableError struct{ *RPCError }
	// OperationBusyError: UNAVAILABLE/OPERATION_BUSY: the operation's row is
	// locked elsewhere. Transient.
	OperationBusyError struct{ *RPCError }
	// RateLimitedError: RESOURCE_EXHAUSTED/RATE_LIMITED: the namespace is past
	// its calls per second. Transient.
	RateLimitedError struct{ *RPCError }
	// TooManyWaitersError: RESOURCE_EXHAUSTED/TOO_MANY_WAITERS: the replica
	// holds as many waiting calls as it allows. Transient (after RetryDelay).
	TooManyWaitersError struct{ *RPCError }
	// InternalError: INTERNAL: a fault of the server.
	InternalError struct{ *RPCError }
)

func (e *InvalidArgumentError) Unwrap() error        { return e.RPCError }
func (e *MessageTooLargeError) Unwrap() error        { return e.RPCError }
func (e *ParameterConflictError) Unwrap() error      { return e.RPCError }
func (e *OperationExistsError) Unwrap() error        { return e.RPCError }
func (e *StaleFencingTokenError) Unwrap() error      { return e.RPCError }
func (e *AlreadyCompletedError) Unwrap() error       { return e.RPCError }
func (e *LeaseNotHeldError) Unwrap() error           { return e.RPCError }
func (e *OriginalOutcomeUnknownError) Unwrap() error { return e.RPCError }
func (e *NothingToCompensateError) Unwrap() error    { return e.RPCError }
func (e *AlreadyCompensatedError) Unwrap() error     { return e.RPCError }
func (e *InvalidTransitionError) Unwrap() error      { return e.RPCError }
func (e *UnauthenticatedError) Unwrap() error        { return e.RPCError }
func (e *PermissionDeniedError) Unwrap() error       { return e.RPCError }
func (e *OperationNotFoundError) Unwrap() error      { return e.RPCError }
func (e *ResourceNotFoundError) Unwrap() error       { return e.RPCError }
func (e *UnavailableError) Unwrap() error            { return e.RPCError }
func (e *OperationBusyError) Unwrap() error          { return e.RPCError }
func (e *RateLimitedError) Unwrap() error            { return e.RPCError }
func (e *TooManyWaitersError) Unwrap() error         { return e.RPCError }
func (e *InternalError) Unwrap() error               { return e.RPCError }

// Limit is the largest request (bytes) the method accepts; ok false if not said.
func (e *MessageTooLargeError) Limit() (limit uint64, ok bool) {
	return parseUint(e.Meta(opregv1.ErrorMetadataKey_ERROR_METADATA_KEY_LIMIT))
}

// StoredDigest is the digest of the parameters the key is registered with.
func (e *ParameterConflictError) StoredDigest() []byte {
	return hexBytes(e.Meta(opregv1.ErrorMetadataKey_ERROR_METADATA_KEY_STORED_DIGEST))
}

// RequestDigest is the digest of the parameters this request sent.
func (e *ParameterConflictError) RequestDigest() []byte {
	return hexBytes(e.Meta(opregv1.ErrorMetadataKey_ERROR_METADATA_KEY_REQUEST_DIGEST))
}

// DifferingFields are the top-level parameter names whose values differ
// (empty when unknown, e.g. when a digest was sent).
func (e *ParameterConflictError) DifferingFields() []string {
	var names []string
	for _, name := range strings.Split(e.Meta(opregv1.ErrorMetadataKey_ERROR_METADATA_KEY_DIFFERING_FIELDS), ",") {
		if name != "" {
			names = append(names, name)
		}
	}
	return names
}

// DifferingFieldsTruncated is true when the server cut DifferingFields short.
func (e *ParameterConflictError) DifferingFieldsTruncated() bool {
	return e.Meta(opregv1.ErrorMetadataKey_ERROR_METADATA_KEY_DIFFERING_FIELDS_TRUNCATED) == "true"
}

// ConflictingField is "compensates" when the conflict is about that field.
func (e *ParameterConflictError) ConflictingField() string {
	return e.Meta(opregv1.ErrorMetadataKey_ERROR_METADATA_KEY_CONFLICTING_FIELD)
}

// PresentedToken is the token the caller presented.
func (e *StaleFencingTokenError) PresentedToken() (uint64, bool) {
	return parseUint(e.Meta(opregv1.ErrorMetadataKey_ERROR_METADATA_KEY_PRESENTED_TOKEN))
}

// CurrentToken is the operation's (or resource's) current token.
func (e *StaleFencingTokenError) CurrentToken() (uint64, bool) {
	return parseUint(e.Meta(opregv1.ErrorMetadataKey_ERROR_METADATA_KEY_CURRENT_TOKEN))
}

// FencingToken is the token that reported.
func (e *AlreadyCompletedError) FencingToken() (uint64, bool) {
	return parseUint(e.Meta(opregv1.ErrorMetadataKey_ERROR_METADATA_KEY_FENCING_TOKEN))
}

// CompensatedBy is the key of the operation that compensates the original.
func (e *AlreadyCompensatedError) CompensatedBy() string {
	return e.Meta(opregv1.ErrorMetadataKey_ERROR_METADATA_KEY_COMPENSATED_BY)
}

// CurrentStatus is the operation's status when the action was refused; ok
// false when the server named none this client knows.
func (e *InvalidTransitionError) CurrentStatus() (opregv1.OperationStatus, bool) {
	return e.currentStatus()
}

// CurrentStatus is the status of the operation registered under the key; ok
// false when the server named none this client knows.
func (e *OperationExistsError) CurrentStatus() (opregv1.OperationStatus, bool) {
	return e.currentStatus()
}

// currentStatus reads the currentStatus metadata, with or without its
// OPERATION_STATUS_ prefix.
func (e *RPCError) currentStatus() (opregv1.OperationStatus, bool) {
	name := e.Meta(opregv1.ErrorMetadataKey_ERROR_METADATA_KEY_CURRENT_STATUS)
	for _, candidate := range []string{name, "OPERATION_STATUS_" + name} {
		if value, ok := opregv1.OperationStatus_value[candidate]; ok && name != "" {
			return opregv1.OperationStatus(value), true
		}
	}
	return opregv1.OperationStatus_OPERATION_STATUS_UNSPECIFIED, false
}

// Held tells whether an operator held the operation; ok false if not said.
func (e *InvalidTransitionError) Held() (held, ok bool) {
	switch e.Meta(opregv1.ErrorMetadataKey_ERROR_METADATA_KEY_HELD) {
	case "true":
		return true, true
	case "false":
		return false, true
	}
	return false, false
}

// Principal is who asked.
func (e *PermissionDeniedError) Principal() string {
	return e.Meta(opregv1.ErrorMetadataKey_ERROR_METADATA_KEY_PRINCIPAL)
}

// Namespace is where.
func (e *PermissionDeniedError) Namespace() string {
	return e.Meta(opregv1.ErrorMetadataKey_ERROR_METADATA_KEY_NAMESPACE)
}

// Role is the role the call needed (reader, worker or admin).
func (e *PermissionDeniedError) Role() string {
	return e.Meta(opregv1.ErrorMetadataKey_ERROR_METADATA_KEY_ROLE)
}

// CallsPerSecond is the namespace's limit.
func (e *RateLimitedError) CallsPerSecond() (uint64, bool) {
	return parseUint(e.Meta(opregv1.ErrorMetadataKey_ERROR_METADATA_KEY_CALLS_PER_SECOND))
}

// Limit is the replica's limit of waiting calls; ok false if not said.
func (e *TooManyWaitersError) Limit() (limit uint64, ok bool) {
	return parseUint(e.Meta(opregv1.ErrorMetadataKey_ERROR_METADATA_KEY_LIMIT))
}

// IsNotFound reports whether err is OPERATION_NOT_FOUND, RESOURCE_NOT_FOUND or
// another NOT_FOUND.
func IsNotFound(err error) bool {
	var rpc *RPCError
	return errors.As(err, &rpc) && rpc.Code == codes.NotFound
}

// IsCompensationError reports whether err is one of the refusals of a
// compensating Claim (ORIGINAL_OUTCOME_UNKNOWN, NOTHING_TO_COMPENSATE,
// ALREADY_COMPENSATED).
func IsCompensationError(err error) bool {
	var (
		unknown     *OriginalOutcomeUnknownError
		nothing     *NothingToCompensateError
		compensated *AlreadyCompensatedError
	)
	return errors.As(err, &unknown) || errors.As(err, &nothing) || errors.As(err, &compensated)
}

// FromError decodes the error of a failed call into its typed error (see
// [RPCError]); nil stays nil, and an error that carries no gRPC status is
// returned as it is. Errors of this package pass through unchanged.
func FromError(err error) error {
	if err == nil {
		return nil
	}
	var rpc *RPCError
	if errors.As(err, &rpc) {
		return err
	}
	st, ok := status.FromError(err)
	if !ok {
		if errors.Is(err, context.DeadlineExceeded) {
			st = status.New(codes.DeadlineExceeded, err.Error())
		} else if errors.Is(err, context.Canceled) {
			st = status.New(codes.Canceled, err.Error())
		} else {
			return err
		}
	}
	return fromStatus(st)
}

// ErrorFromStatus decodes a google.rpc.Status (one result of BatchClaim or
// BatchComplete) into its typed error; nil for OK.
func ErrorFromStatus(s *statuspb.Status) error {
	if s == nil || codes.Code(s.GetCode()) == codes.OK {
		return nil
	}
	return fromStatus(status.FromProto(s))
}

func fromStatus(st *status.Status) error {
	rpc := &RPCError{Code: st.Code(), Message: st.Message(), Metadata: map[string]string{}, status: st}
	seenInfo := false
	for _, detail := range st.Details() {
		switch d := detail.(type) {
		case *errdetails.ErrorInfo:
			if !seenInfo && d.GetDomain() == ErrorDomain {
				seenInfo = true
				rpc.ReasonText = d.GetReason()
				rpc.Reason = ParseReason(d.GetReason())
				for k, v := range d.GetMetadata() {
					rpc.Metadata[k] = v
				}
			}
		case *errdetails.RetryInfo:
			if delay := d.GetRetryDelay(); delay != nil && rpc.RetryDelay == 0 {
				rpc.RetryDelay = max(delay.AsDuration(), 0)
			}
		case *errdetails.BadRequest:
			for _, v := range d.GetFieldViolations() {
				rpc.FieldViolations = append(rpc.FieldViolations, FieldViolation{Field: v.GetField(), Description: v.GetDescription()})
			}
		}
	}
	return typed(rpc)
}

// typed picks the error type by the reason, switching over every ErrorReason
// (errors_test.go fails when errors.proto adds one that is not here), and by
// the code when there is no reason (or one newer than this client).
func typed(e *RPCError) error {
	switch e.Reason {
	case opregv1.ErrorReason_ERROR_REASON_UNSPECIFIED:
		return byCode(e)
	case opregv1.ErrorReason_ERROR_REASON_INVALID_ARGUMENT:
		return &InvalidArgumentError{e}
	case opregv1.ErrorReason_ERROR_REASON_MESSAGE_TOO_LARGE:
		return &MessageTooLargeError{e}
	case opregv1.ErrorReason_ERROR_REASON_PARAMETER_CONFLICT:
		return &ParameterConflictError{e}
	case opregv1.ErrorReason_ERROR_REASON_STALE_FENCING_TOKEN:
		return &StaleFencingTokenError{e}
	case opregv1.ErrorReason_ERROR_REASON_ALREADY_COMPLETED:
		return &AlreadyCompletedError{e}
	case opregv1.ErrorReason_ERROR_REASON_LEASE_NOT_HELD:
		return &LeaseNotHeldError{e}
	case opregv1.ErrorReason_ERROR_REASON_ORIGINAL_OUTCOME_UNKNOWN:
		return &OriginalOutcomeUnknownError{e}
	case opregv1.ErrorReason_ERROR_REASON_NOTHING_TO_COMPENSATE:
		return &NothingToCompensateError{e}
	case opregv1.ErrorReason_ERROR_REASON_ALREADY_COMPENSATED:
		return &AlreadyCompensatedError{e}
	case opregv1.ErrorReason_ERROR_REASON_INVALID_TRANSITION:
		return &InvalidTransitionError{e}
	case opregv1.ErrorReason_ERROR_REASON_UNAUTHENTICATED:
		return &UnauthenticatedError{e}
	case opregv1.ErrorReason_ERROR_REASON_PERMISSION_DENIED:
		return &PermissionDeniedError{e}
	case opregv1.ErrorReason_ERROR_REASON_OPERATION_NOT_FOUND:
		return &OperationNotFoundError{e}
	case opregv1.ErrorReason_ERROR_REASON_RESOURCE_NOT_FOUND:
		return &ResourceNotFoundError{e}
	case opregv1.ErrorReason_ERROR_REASON_STORE_UNAVAILABLE:
		return &UnavailableError{e}
	case opregv1.ErrorReason_ERROR_REASON_OPERATION_BUSY:
		return &OperationBusyError{e}
	case opregv1.ErrorReason_ERROR_REASON_OVERLOADED:
		return &UnavailableError{e}
	case opregv1.ErrorReason_ERROR_REASON_RATE_LIMITED:
		return &RateLimitedError{e}
	case opregv1.ErrorReason_ERROR_REASON_DEADLINE_EXCEEDED:
		return &UnavailableError{e}
	case opregv1.ErrorReason_ERROR_REASON_INTERNAL:
		return &InternalError{e}
	case opregv1.ErrorReason_ERROR_REASON_OPERATION_EXISTS:
		return &OperationExistsError{e}
	case opregv1.ErrorReason_ERROR_REASON_TOO_MANY_WAITERS:
		return &TooManyWaitersError{e}
	}
	return byCode(e)
}

// byCode types an error without a known reason by its status code.
func byCode(e *RPCError) error {
	switch e.Code {
	case codes.Unavailable, codes.DeadlineExceeded:
		return &UnavailableError{e}
	case codes.Canceled:
		if e.Message == serverTimeoutMessage {
			return &UnavailableError{e}
		}
	case codes.InvalidArgument:
		return &InvalidArgumentError{e}
	case codes.Unauthenticated:
		return &UnauthenticatedError{e}
	case codes.PermissionDenied:
		return &PermissionDeniedError{e}
	case codes.Internal:
		return &InternalError{e}
	}
	return e
}

func parseUint(text string) (uint64, bool) {
	if text == "" {
		return 0, false
	}
	value, err := strconv.ParseUint(text, 10, 64)
	return value, err == nil
}

func hexBytes(text string) []byte {
	decoded, err := hex.DecodeString(text)
	if err != nil {
		return nil
	}
	return decoded
}
