package dev.opreg.client;

import com.google.protobuf.Any;
import com.google.protobuf.InvalidProtocolBufferException;
import com.google.protobuf.Message;
import com.google.rpc.BadRequest;
import com.google.rpc.ErrorInfo;
import com.google.rpc.RetryInfo;
import io.grpc.Status;
import io.grpc.protobuf.StatusProto;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import opreg.v1.Errors.ErrorMetadataKey;
import opreg.v1.Errors.ErrorReason;

/**
 * Turns a failed call into its typed {@link OpregException}, by the one {@code google.rpc.ErrorInfo}
 * (domain {@code "opreg"}) it carries.
 *
 * <p>The reasons and metadata keys are the enums of {@code proto/opreg/v1/errors.proto}: a reason
 * travels as its name without {@code ERROR_REASON_} ({@link #reasonName}), a metadata key as its name
 * without {@code ERROR_METADATA_KEY_} in lowerCamelCase ({@link #metadataKey}). {@link #classOf} and
 * {@link #readersOf} are exhaustive switches over the generated enums: a value added to the contract
 * does not compile until it is mapped here.
 */
public final class OpregErrors {
  /** The ErrorInfo domain of opreg's errors. */
  public static final String ERROR_DOMAIN = "opreg";

  /**
   * What a server's own timer answers (as {@code CANCELLED}) when the caller's deadline passed inside
   * it: transient, like {@code DEADLINE_EXCEEDED}.
   */
  public static final String SERVER_TIMEOUT_MESSAGE = "Timeout expired";

  private static final String REASON_PREFIX = "ERROR_REASON_";
  private static final String KEY_PREFIX = "ERROR_METADATA_KEY_";

  private OpregErrors() {}

  /** Builds one typed error; the constructors of the {@link OpregException} subclasses. */
  @FunctionalInterface
  interface Factory {
    OpregException create(
        String message,
        Throwable cause,
        Status.Code code,
        String reason,
        Map<String, String> metadata,
        List<Message> details);
  }

  /** The ErrorInfo reason of {@code reason}: {@code ERROR_REASON_PARAMETER_CONFLICT} → {@code PARAMETER_CONFLICT}. */
  public static String reasonName(ErrorReason reason) {
    return reason.name().substring(REASON_PREFIX.length());
  }

  /** The ErrorInfo metadata key of {@code key}: {@code ERROR_METADATA_KEY_STORED_DIGEST} → {@code storedDigest}. */
  public static String metadataKey(ErrorMetadataKey key) {
    String[] words = key.name().substring(KEY_PREFIX.length()).toLowerCase(Locale.ROOT).split("_");
    StringBuilder out = new StringBuilder(words[0]);
    for (int i = 1; i < words.length; i++) {
      out.append(Character.toUpperCase(words[i].charAt(0))).append(words[i].substring(1));
    }
    return out.toString();
  }

  /** The {@link ErrorReason} an ErrorInfo reason names; {@code ERROR_REASON_UNSPECIFIED} if none or unknown. */
  public static ErrorReason parseReason(String reason) {
    if (reason == null || reason.isEmpty()) {
      return ErrorReason.ERROR_REASON_UNSPECIFIED;
    }
    for (ErrorReason value : ErrorReason.values()) {
      if (value != ErrorReason.UNRECOGNIZED && reasonName(value).equals(reason)) {
        return value;
      }
    }
    return ErrorReason.ERROR_REASON_UNSPECIFIED;
  }

  /** The class an error with {@code reason} is raised as; {@code null} for none (decided by the code). */
  public static Class<? extends OpregException> classOf(ErrorReason reason) {
    return switch (reason) {
      case ERROR_REASON_INVALID_ARGUMENT -> InvalidArgumentException.class;
      case ERROR_REASON_MESSAGE_TOO_LARGE -> MessageTooLargeException.class;
      case ERROR_REASON_PARAMETER_CONFLICT -> ParameterConflictException.class;
      case ERROR_REASON_STALE_FENCING_TOKEN -> StaleFencingTokenException.class;
      case ERROR_REASON_ALREADY_COMPLETED -> AlreadyCompletedException.class;
      case ERROR_REASON_LEASE_NOT_HELD -> LeaseNotHeldException.class;
      case ERROR_REASON_ORIGINAL_OUTCOME_UNKNOWN -> OriginalOutcomeUnknownException.class;
      case ERROR_REASON_NOTHING_TO_COMPENSATE -> NothingToCompensateException.class;
      case ERROR_REASON_ALREADY_COMPENSATED -> AlreadyCompensatedException.class;
      case ERROR_REASON_INVALID_TRANSITION -> InvalidTransitionException.class;
      case ERROR_REASON_UNAUTHENTICATED -> UnauthenticatedException.class;
      case ERROR_REASON_PERMISSION_DENIED -> PermissionDeniedException.class;
      case ERROR_REASON_OPERATION_NOT_FOUND -> OperationNotFoundException.class;
      case ERROR_REASON_RESOURCE_NOT_FOUND -> ResourceNotFoundException.class;
      case ERROR_REASON_STORE_UNAVAILABLE -> UnavailableException.class;
      case ERROR_REASON_OPERATION_BUSY -> OperationBusyException.class;
      case ERROR_REASON_OVERLOADED -> UnavailableException.class;
      case ERROR_REASON_RATE_LIMITED -> RateLimitedException.class;
      case ERROR_REASON_DEADLINE_EXCEEDED -> UnavailableException.class;
      case ERROR_REASON_INTERNAL -> InternalException.class;
      case ERROR_REASON_OPERATION_EXISTS -> OperationExistsException.class;
      case ERROR_REASON_TOO_MANY_WAITERS -> TooManyWaitersException.class;
      case ERROR_REASON_UNSPECIFIED, UNRECOGNIZED -> null;
    };
  }

  /** The error classes whose accessors read metadata {@code key}; empty for UNSPECIFIED. */
  public static List<Class<? extends OpregException>> readersOf(ErrorMetadataKey key) {
    return switch (key) {
      case ERROR_METADATA_KEY_LIMIT -> List.of(MessageTooLargeException.class, TooManyWaitersException.class);
      case ERROR_METADATA_KEY_STORED_DIGEST,
          ERROR_METADATA_KEY_REQUEST_DIGEST,
          ERROR_METADATA_KEY_DIFFERING_FIELDS,
          ERROR_METADATA_KEY_DIFFERING_FIELDS_TRUNCATED,
          ERROR_METADATA_KEY_CONFLICTING_FIELD -> List.of(ParameterConflictException.class);
      case ERROR_METADATA_KEY_PRESENTED_TOKEN, ERROR_METADATA_KEY_CURRENT_TOKEN ->
          List.of(StaleFencingTokenException.class);
      case ERROR_METADATA_KEY_FENCING_TOKEN -> List.of(AlreadyCompletedException.class);
      case ERROR_METADATA_KEY_COMPENSATED_BY -> List.of(AlreadyCompensatedException.class);
      case ERROR_METADATA_KEY_CURRENT_STATUS -> List.of(InvalidTransitionException.class, OperationExistsException.class);
      case ERROR_METADATA_KEY_HELD -> List.of(InvalidTransitionException.class);
      case ERROR_METADATA_KEY_PRINCIPAL, ERROR_METADATA_KEY_NAMESPACE, ERROR_METADATA_KEY_ROLE ->
          List.of(PermissionDeniedException.class);
      case ERROR_METADATA_KEY_CALLS_PER_SECOND -> List.of(RateLimitedException.class);
      case ERROR_METADATA_KEY_UNSPECIFIED, UNRECOGNIZED -> List.of();
    };
  }

  static Factory factoryOf(Class<? extends OpregException> type) {
    if (type == null) {
      return null;
    }
    // One constructor reference per class; the switch above decides which class.
    if (type == InvalidArgumentException.class) return InvalidArgumentException::new;
    if (type == MessageTooLargeException.class) return MessageTooLargeException::new;
    if (type == ParameterConflictException.class) return ParameterConflictException::new;
    if (type == StaleFencingTokenException.class) return StaleFencingTokenException::new;
    if (type == AlreadyCompletedException.class) return AlreadyCompletedException::new;
    if (type == LeaseNotHeldException.class) return LeaseNotHeldException::new;
    if (type == OriginalOutcomeUnknownException.class) return OriginalOutcomeUnknownException::new;
    if (type == NothingToCompensateException.class) return NothingToCompensateException::new;
    if (type == AlreadyCompensatedException.class) return AlreadyCompensatedException::new;
    if (type == InvalidTransitionException.class) return InvalidTransitionException::new;
    if (type == UnauthenticatedException.class) return UnauthenticatedException::new;
    if (type == PermissionDeniedException.class) return PermissionDeniedException::new;
    if (type == NotFoundException.class) return NotFoundException::new;
    if (type == OperationNotFoundException.class) return OperationNotFoundException::new;
    if (type == ResourceNotFoundException.class) return ResourceNotFoundException::new;
    if (type == UnavailableException.class) return UnavailableException::new;
    if (type == OperationBusyException.class) return OperationBusyException::new;
    if (type == RateLimitedException.class) return RateLimitedException::new;
    if (type == InternalException.class) return InternalException::new;
    if (type == OperationExistsException.class) return OperationExistsException::new;
    if (type == TooManyWaitersException.class) return TooManyWaitersException::new;
    throw new IllegalArgumentException("no factory for " + type.getName());
  }

  /** The class of an error that carried no ErrorInfo reason this client knows, by its gRPC code. */
  static Class<? extends OpregException> classOf(Status.Code code, String message) {
    return switch (code) {
      case UNAVAILABLE, DEADLINE_EXCEEDED -> UnavailableException.class;
      case NOT_FOUND -> NotFoundException.class;
      case INVALID_ARGUMENT -> InvalidArgumentException.class;
      case UNAUTHENTICATED -> UnauthenticatedException.class;
      case PERMISSION_DENIED -> PermissionDeniedException.class;
      case INTERNAL -> InternalException.class;
      case CANCELLED -> isServerTimeout(code, message) ? UnavailableException.class : null;
      default -> null;
    };
  }

  /** True for the {@code CANCELLED} "Timeout expired" of a server's own timer (transient). */
  public static boolean isServerTimeout(Status.Code code, String message) {
    return code == Status.Code.CANCELLED && SERVER_TIMEOUT_MESSAGE.equals(message);
  }

  /** True for the transient errors (see {@link UnavailableException}). */
  public static boolean isTransient(Throwable error) {
    return error instanceof UnavailableException;
  }

  /**
   * The typed error for a failed call: a {@code StatusRuntimeException} or {@code StatusException}
   * (an {@link OpregException} is returned as it is; anything else becomes a plain OpregException).
   */
  public static OpregException fromThrowable(Throwable error) {
    if (error instanceof OpregException opreg) {
      return opreg;
    }
    Status status = Status.fromThrowable(error);
    com.google.rpc.Status detailed = StatusProto.fromThrowable(error);
    String message = status.getDescription() != null ? status.getDescription() : "";
    if (message.isEmpty() && status.getCode() == Status.Code.UNKNOWN && status.getCause() == null) {
      message = String.valueOf(error);
    }
    return build(status.getCode(), message, detailed == null ? List.of() : detailed.getDetailsList(), error);
  }

  /** The typed error of a {@code google.rpc.Status}, e.g. one entry of a BatchClaim answer. */
  public static OpregException fromStatus(com.google.rpc.Status status) {
    return build(Status.fromCodeValue(status.getCode()).getCode(), status.getMessage(), status.getDetailsList(), null);
  }

  private static OpregException build(Status.Code code, String message, List<Any> anyDetails, Throwable cause) {
    List<Message> details = new ArrayList<>();
    ErrorInfo info = null;
    for (Any any : anyDetails) {
      try {
        if (any.is(ErrorInfo.class)) {
          ErrorInfo decoded = any.unpack(ErrorInfo.class);
          details.add(decoded);
          if (info == null) {
            info = decoded;
          }
        } else if (any.is(RetryInfo.class)) {
          details.add(any.unpack(RetryInfo.class));
        } else if (any.is(BadRequest.class)) {
          details.add(any.unpack(BadRequest.class));
        }
      } catch (InvalidProtocolBufferException e) {
        // A detail that does not decode is left out; the status itself still counts.
      }
    }
    String reason = "";
    Map<String, String> metadata = Map.of();
    if (info != null && ERROR_DOMAIN.equals(info.getDomain())) {
      reason = info.getReason();
      metadata = info.getMetadataMap();
    }
    Class<? extends OpregException> type = classOf(parseReason(reason));
    if (type == null) {
      type = classOf(code, message);
    }
    Factory factory = factoryOf(type);
    if (factory == null) {
      return new OpregException(message, cause, code, reason, metadata, details);
    }
    return factory.create(message, cause, code, reason, metadata, details);
  }
}
