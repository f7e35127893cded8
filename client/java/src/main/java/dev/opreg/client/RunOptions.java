package dev.opreg.client;

import com.google.protobuf.ByteString;
import com.google.protobuf.Struct;
import java.net.InetAddress;
import java.time.Duration;
import java.util.Map;
import java.util.Objects;
import java.util.UUID;
import opreg.v1.Registry.ClaimRequest;
import opreg.v1.Registry.RetryPolicy;

/**
 * What the run-once helper runs and how: the operation (namespace, key, parameters or their digest)
 * and the protocol's settings, with the defaults of {@code client/PROTOCOL.md}: deadline 120 s,
 * lease 30 s, renewals every TTL / 3, call timeout 10 s, server waits of at most 30 s.
 *
 * <pre>{@code
 * RunOptions options = RunOptions.builder("payments", "debit:order-7")
 *     .parameters(Map.of("account", "A", "amount", 100))
 *     .reconcile((lease, remoteRef) -> psp.check(remoteRef))
 *     .build();
 * }</pre>
 */
public final class RunOptions {
  /** The overall deadline's default: bounds claiming, waiting and retrying (not the work). */
  public static final Duration DEFAULT_DEADLINE = Duration.ofSeconds(120);
  /** The lease TTL's default (the server's). */
  public static final Duration DEFAULT_LEASE_TTL = Duration.ofSeconds(30);
  /** The timeout of one call. */
  public static final Duration DEFAULT_CALL_TIMEOUT = Duration.ofSeconds(10);
  /** The longest a Claim asks the server to hold it while the operation is busy or not yet due. */
  public static final Duration DEFAULT_MAX_CLAIM_WAIT = Duration.ofSeconds(30);
  /** How often IN_PROGRESS is polled at most, from a server that does not wait. */
  public static final Duration DEFAULT_POLL_INTERVAL = Duration.ofSeconds(1);
  /** The transport backoff: full jitter over min(5 s, 100 ms · 2^n). */
  public static final Duration DEFAULT_BACKOFF_INITIAL = Duration.ofMillis(100);
  public static final Duration DEFAULT_BACKOFF_MAX = Duration.ofSeconds(5);

  final String namespace;
  final String operationKey;
  final Struct parameters;
  final byte[] parametersDigest;
  final String owner;
  final String executionId;
  final Duration leaseTtl;
  final Duration deadline;
  final RetryPolicy retryPolicy;
  final String compensates;
  final Duration renewInterval;
  final Duration callTimeout;
  final Duration maxClaimWait;
  final Duration pollInterval;
  final Duration backoffInitial;
  final Duration backoffMax;
  final boolean retryTransient;
  final Reconciler reconciler;

  private RunOptions(Builder b) {
    this.namespace = b.namespace;
    this.operationKey = b.operationKey;
    this.parameters = b.parameters;
    this.parametersDigest = b.parametersDigest;
    this.owner = b.owner;
    this.executionId = b.executionId;
    this.leaseTtl = b.leaseTtl;
    this.deadline = b.deadline;
    this.retryPolicy = b.retryPolicy;
    this.compensates = b.compensates;
    this.renewInterval = b.renewInterval != null ? b.renewInterval : b.leaseTtl.dividedBy(3);
    this.callTimeout = b.callTimeout;
    this.maxClaimWait = b.maxClaimWait;
    this.pollInterval = b.pollInterval;
    this.backoffInitial = b.backoffInitial;
    this.backoffMax = b.backoffMax;
    this.retryTransient = b.retryTransient;
    this.reconciler = b.reconciler;
  }

  public static Builder builder(String namespace, String operationKey) {
    return new Builder(namespace, operationKey);
  }

  /** These options for another key and owner (the worker's operations). */
  RunOptions forOperation(String key, String ownerOfLease, Reconciler reconcile) {
    Builder b = toBuilder();
    b.operationKey = key;
    b.owner = ownerOfLease;
    b.reconciler = reconcile;
    return b.buildForWorker();
  }

  public Builder toBuilder() {
    Builder b = new Builder(namespace, operationKey);
    b.parameters = parameters;
    b.parametersDigest = parametersDigest;
    b.owner = owner;
    b.executionId = executionId;
    b.leaseTtl = leaseTtl;
    b.deadline = deadline;
    b.retryPolicy = retryPolicy;
    b.compensates = compensates;
    b.renewInterval = renewInterval;
    b.callTimeout = callTimeout;
    b.maxClaimWait = maxClaimWait;
    b.pollInterval = pollInterval;
    b.backoffInitial = backoffInitial;
    b.backoffMax = backoffMax;
    b.retryTransient = retryTransient;
    b.reconciler = reconciler;
    return b;
  }

  public String namespace() {
    return namespace;
  }

  public String operationKey() {
    return operationKey;
  }

  /** The owner given; {@code null}: a fresh {@link #defaultOwner()} per helper call. */
  public String owner() {
    return owner;
  }

  public Duration leaseTtl() {
    return leaseTtl;
  }

  public Duration deadline() {
    return deadline;
  }

  public Duration renewInterval() {
    return renewInterval;
  }

  public Duration callTimeout() {
    return callTimeout;
  }

  public Reconciler reconciler() {
    return reconciler;
  }

  /** The Claim these options send, by {@code owner}. */
  ClaimRequest claimRequest(String claimOwner) {
    ClaimRequest.Builder request = ClaimRequest.newBuilder()
        .setNamespace(namespace)
        .setOperationKey(operationKey)
        .setOwner(claimOwner)
        .setExecutionId(executionId)
        .setLeaseTtl(Durations.toProto(leaseTtl))
        .setCompensates(compensates);
    if (parametersDigest != null) {
      request.setParametersDigest(ByteString.copyFrom(parametersDigest));
    } else if (parameters != null) {
      request.setParameters(parameters);
    }
    if (retryPolicy != null) {
      request.setRetryPolicy(retryPolicy);
    }
    return request.build();
  }

  /** A fresh owner naming this process and one run: {@code host/pid/random}. */
  public static String defaultOwner() {
    String host;
    try {
      host = InetAddress.getLocalHost().getHostName();
    } catch (Exception e) {
      host = "localhost";
    }
    long pid = ProcessHandle.current().pid();
    String random = UUID.randomUUID().toString().replace("-", "").substring(0, 12);
    return host + "/" + pid + "/" + random;
  }

  /** A {@code RetryPolicy} (all four fields are required when one is given). */
  public static RetryPolicy retryPolicy(int maxAttempts, Duration initialBackoff, Duration maxBackoff, Duration deadline) {
    return RetryPolicy.newBuilder()
        .setMaxAttempts(maxAttempts)
        .setInitialBackoff(Durations.toProto(initialBackoff))
        .setMaxBackoff(Durations.toProto(maxBackoff))
        .setDeadline(Durations.toProto(deadline))
        .build();
  }

  /** Builds {@link RunOptions}. */
  public static final class Builder {
    private final String namespace;
    private String operationKey;
    private Struct parameters;
    private byte[] parametersDigest;
    private String owner;
    private String executionId = "";
    private Duration leaseTtl = DEFAULT_LEASE_TTL;
    private Duration deadline = DEFAULT_DEADLINE;
    private RetryPolicy retryPolicy;
    private String compensates = "";
    private Duration renewInterval;
    private Duration callTimeout = DEFAULT_CALL_TIMEOUT;
    private Duration maxClaimWait = DEFAULT_MAX_CLAIM_WAIT;
    private Duration pollInterval = DEFAULT_POLL_INTERVAL;
    private Duration backoffInitial = DEFAULT_BACKOFF_INITIAL;
    private Duration backoffMax = DEFAULT_BACKOFF_MAX;
    private boolean retryTransient = true;
    private Reconciler reconciler;

    private Builder(String namespace, String operationKey) {
      this.namespace = Objects.requireNonNull(namespace, "namespace");
      this.operationKey = Objects.requireNonNull(operationKey, "operationKey");
    }

    /** The parameters, sent as a Struct (the server canonicalises and hashes them). */
    public Builder parameters(Map<String, ?> parameters) {
      return parameters(Parameters.toStruct(parameters));
    }

    public Builder parameters(Struct parameters) {
      this.parameters = Objects.requireNonNull(parameters);
      this.parametersDigest = null;
      return this;
    }

    /** A digest computed here instead of the parameters (16 to 64 bytes; see {@link ParameterDigest}). */
    public Builder parametersDigest(byte[] digest) {
      this.parametersDigest = digest.clone();
      this.parameters = null;
      return this;
    }

    /** The owner of the lease; default: a fresh {@code host/pid/random} per helper call. */
    public Builder owner(String owner) {
      this.owner = owner;
      return this;
    }

    /** The scheduler's run id, recorded with each execution. */
    public Builder executionId(String executionId) {
      this.executionId = Objects.requireNonNull(executionId);
      return this;
    }

    public Builder leaseTtl(Duration leaseTtl) {
      this.leaseTtl = positive(leaseTtl, "leaseTtl");
      return this;
    }

    /** Bounds claiming, waiting and retrying; the work itself is not cut by it. */
    public Builder deadline(Duration deadline) {
      this.deadline = positive(deadline, "deadline");
      return this;
    }

    /** Used when the operation is first registered; default: the server's. */
    public Builder retryPolicy(RetryPolicy retryPolicy) {
      this.retryPolicy = retryPolicy;
      return this;
    }

    /** The key of the operation in the same namespace this one compensates. */
    public Builder compensates(String compensates) {
      this.compensates = Objects.requireNonNull(compensates);
      return this;
    }

    /** Default: lease TTL / 3. */
    public Builder renewInterval(Duration renewInterval) {
      this.renewInterval = positive(renewInterval, "renewInterval");
      return this;
    }

    public Builder callTimeout(Duration callTimeout) {
      this.callTimeout = positive(callTimeout, "callTimeout");
      return this;
    }

    /**
     * The longest server wait a Claim asks for (never past the deadline): the server holds the Claim
     * while the operation is IN_PROGRESS or its retry not yet due, and answers as soon as it moves.
     */
    public Builder maxClaimWait(Duration maxClaimWait) {
      this.maxClaimWait = positive(maxClaimWait, "maxClaimWait");
      return this;
    }

    /** How often IN_PROGRESS is claimed again at most, from a server that does not wait. */
    public Builder pollInterval(Duration pollInterval) {
      this.pollInterval = positive(pollInterval, "pollInterval");
      return this;
    }

    /** The transport backoff: full jitter over min(max, initial · 2^n). */
    public Builder transportBackoff(Duration initial, Duration max) {
      this.backoffInitial = positive(initial, "initial");
      this.backoffMax = positive(max, "max");
      return this;
    }

    /**
     * False: a recorded {@link TransientException} is rethrown instead of claimed again (and a
     * sent-but-unconfirmed outcome is {@link OutcomeUnknownException}).
     */
    public Builder retryTransient(boolean retryTransient) {
      this.retryTransient = retryTransient;
      return this;
    }

    /** The reconcile callback for RECONCILE; without one, RECONCILE is {@link ReconcileRequiredException}. */
    public Builder reconcile(Reconciler reconciler) {
      this.reconciler = reconciler;
      return this;
    }

    public RunOptions build() {
      if (parameters == null && parametersDigest == null) {
        throw new IllegalStateException("give the parameters or their digest");
      }
      return new RunOptions(this);
    }

    /** Without the check for parameters: the worker's settings (ClaimDue has no parameters). */
    RunOptions buildForWorker() {
      return new RunOptions(this);
    }

    private static Duration positive(Duration value, String name) {
      if (value == null || value.isNegative() || value.isZero()) {
        throw new IllegalArgumentException(name + " must be positive, not " + value);
      }
      return value;
    }
  }
}
