package dev.opreg.client;

import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ChannelCredentials;
import io.grpc.ClientCall;
import io.grpc.ClientInterceptors;
import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import io.grpc.StatusRuntimeException;
import io.grpc.TlsChannelCredentials;
import io.grpc.stub.ClientCalls;
import io.grpc.stub.MetadataUtils;
import io.grpc.stub.StreamObserver;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.URI;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import opreg.v1.Admin.HoldOperationRequest;
import opreg.v1.Admin.HoldOperationResponse;
import opreg.v1.Admin.ListOperationsRequest;
import opreg.v1.Admin.ListOperationsResponse;
import opreg.v1.Admin.ReleaseOperationRequest;
import opreg.v1.Admin.ReleaseOperationResponse;
import opreg.v1.Admin.RequeueOperationRequest;
import opreg.v1.Admin.RequeueOperationResponse;
import opreg.v1.Admin.ResolveOperationRequest;
import opreg.v1.Admin.ResolveOperationResponse;
import opreg.v1.OperationAdminGrpc;
import opreg.v1.OperationRegistryGrpc;
import opreg.v1.Registry.BatchClaimRequest;
import opreg.v1.Registry.BatchClaimResponse;
import opreg.v1.Registry.BatchCompleteRequest;
import opreg.v1.Registry.BatchCompleteResponse;
import opreg.v1.Registry.ClaimDueRequest;
import opreg.v1.Registry.ClaimDueResponse;
import opreg.v1.Registry.ClaimRequest;
import opreg.v1.Registry.ClaimResponse;
import opreg.v1.Registry.CompleteRequest;
import opreg.v1.Registry.CompleteResponse;
import opreg.v1.Registry.FencedWriteRequest;
import opreg.v1.Registry.FencedWriteResponse;
import opreg.v1.Registry.GetResourceRequest;
import opreg.v1.Registry.GetResourceResponse;
import opreg.v1.Registry.LookupRequest;
import opreg.v1.Registry.LookupResponse;
import opreg.v1.Registry.RenewRequest;
import opreg.v1.Registry.RenewResponse;

/**
 * An opreg client: one typed method per RPC of {@code OperationRegistry} (and {@code
 * OperationAdmin}), blocking ({@code claim}) and with a {@link CompletableFuture} ({@code
 * claimAsync}); the run-once helper ({@link #runOnce}); and the channel, which may speak TLS (with
 * a client certificate) and carry an API key.
 *
 * <p>A failed call throws (or completes the future with) a subclass of {@link OpregException},
 * chosen by the ErrorInfo reason. Thread-safe; close it when done.
 *
 * <pre>{@code
 * try (OpregClient client = OpregClient.connect("127.0.0.1:50051")) {
 *   ClaimResponse claimed = client.claim(ClaimRequest.newBuilder()...build());
 * }
 * }</pre>
 */
public final class OpregClient implements AutoCloseable {
  private static final Metadata.Key<String> AUTHORIZATION =
      Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER);

  private final ManagedChannel owned;
  private final Channel channel;
  private final Duration defaultTimeout;
  private final ExecutorService executor;
  private final boolean ownsExecutor;

  private OpregClient(ManagedChannel owned, Channel channel, String apiKey, Duration defaultTimeout, ExecutorService executor) {
    this.owned = owned;
    if (apiKey != null) {
      // Sent with every call as metadata, exactly as the Rust client does (`authorization:
      // Bearer <key>`), rather than as call credentials, which a plaintext channel may refuse.
      Metadata headers = new Metadata();
      headers.put(AUTHORIZATION, "Bearer " + apiKey);
      channel = ClientInterceptors.intercept(channel, MetadataUtils.newAttachHeadersInterceptor(headers));
    }
    this.channel = channel;
    this.defaultTimeout = defaultTimeout;
    this.ownsExecutor = executor == null;
    this.executor = executor != null ? executor : Executors.newCachedThreadPool(daemonThreads("opreg-run-once-"));
  }

  /** A plaintext client to {@code target} ({@code host:port} or {@code http://host:port}). */
  public static OpregClient connect(String target) {
    return builder(target).build();
  }

  /** A client over a channel built elsewhere (not closed by {@link #close()}), without an API key. */
  public static OpregClient over(Channel channel) {
    return new OpregClient(null, channel, null, null, null);
  }

  /**
   * Settings for a client to {@code target}: {@code host:port}, {@code http://host:port}
   * (plaintext) or {@code https://host:port} (TLS).
   */
  public static Builder builder(String target) {
    return new Builder(target);
  }

  /** The channel every call travels on (with the API key, if any), for other generated stubs. */
  public Channel channel() {
    return channel;
  }

  /** The version of this client ({@code VERSION}). */
  public static String version() {
    return Version.get();
  }

  /**
   * Closes the channel (if this client built it) and its own executor: {@link #runOnceAsync} calls
   * still running are interrupted.
   */
  @Override
  public void close() {
    if (ownsExecutor) {
      executor.shutdownNow();
    }
    if (owned != null) {
      owned.shutdownNow();
      try {
        owned.awaitTermination(5, TimeUnit.SECONDS);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }
  }

  // -- OperationRegistry -------------------------------------------------------------------

  /** Registers an operation, or tells the caller what to do about an existing one. */
  public ClaimResponse claim(ClaimRequest request) {
    return call(OperationRegistryGrpc.getClaimMethod(), request, null);
  }

  public ClaimResponse claim(ClaimRequest request, Duration timeout) {
    return call(OperationRegistryGrpc.getClaimMethod(), request, timeout);
  }

  public CompletableFuture<ClaimResponse> claimAsync(ClaimRequest request) {
    return callAsync(OperationRegistryGrpc.getClaimMethod(), request, null);
  }

  public CompletableFuture<ClaimResponse> claimAsync(ClaimRequest request, Duration timeout) {
    return callAsync(OperationRegistryGrpc.getClaimMethod(), request, timeout);
  }

  /** Records the outcome of the execution holding {@code fencing_token}. */
  public CompleteResponse complete(CompleteRequest request) {
    return call(OperationRegistryGrpc.getCompleteMethod(), request, null);
  }

  public CompleteResponse complete(CompleteRequest request, Duration timeout) {
    return call(OperationRegistryGrpc.getCompleteMethod(), request, timeout);
  }

  public CompletableFuture<CompleteResponse> completeAsync(CompleteRequest request) {
    return callAsync(OperationRegistryGrpc.getCompleteMethod(), request, null);
  }

  public CompletableFuture<CompleteResponse> completeAsync(CompleteRequest request, Duration timeout) {
    return callAsync(OperationRegistryGrpc.getCompleteMethod(), request, timeout);
  }

  /** Reads an operation and, optionally, its executions, parameters and audit. */
  public LookupResponse lookup(LookupRequest request) {
    return call(OperationRegistryGrpc.getLookupMethod(), request, null);
  }

  public LookupResponse lookup(LookupRequest request, Duration timeout) {
    return call(OperationRegistryGrpc.getLookupMethod(), request, timeout);
  }

  public CompletableFuture<LookupResponse> lookupAsync(LookupRequest request) {
    return callAsync(OperationRegistryGrpc.getLookupMethod(), request, null);
  }

  public CompletableFuture<LookupResponse> lookupAsync(LookupRequest request, Duration timeout) {
    return callAsync(OperationRegistryGrpc.getLookupMethod(), request, timeout);
  }

  /** Extends the lease of the current holder. */
  public RenewResponse renew(RenewRequest request) {
    return call(OperationRegistryGrpc.getRenewMethod(), request, null);
  }

  public RenewResponse renew(RenewRequest request, Duration timeout) {
    return call(OperationRegistryGrpc.getRenewMethod(), request, timeout);
  }

  public CompletableFuture<RenewResponse> renewAsync(RenewRequest request) {
    return callAsync(OperationRegistryGrpc.getRenewMethod(), request, null);
  }

  public CompletableFuture<RenewResponse> renewAsync(RenewRequest request, Duration timeout) {
    return callAsync(OperationRegistryGrpc.getRenewMethod(), request, timeout);
  }

  /** Writes a protected resource, refusing superseded fencing tokens. */
  public FencedWriteResponse fencedWrite(FencedWriteRequest request) {
    return call(OperationRegistryGrpc.getFencedWriteMethod(), request, null);
  }

  public FencedWriteResponse fencedWrite(FencedWriteRequest request, Duration timeout) {
    return call(OperationRegistryGrpc.getFencedWriteMethod(), request, timeout);
  }

  public CompletableFuture<FencedWriteResponse> fencedWriteAsync(FencedWriteRequest request) {
    return callAsync(OperationRegistryGrpc.getFencedWriteMethod(), request, null);
  }

  public CompletableFuture<FencedWriteResponse> fencedWriteAsync(FencedWriteRequest request, Duration timeout) {
    return callAsync(OperationRegistryGrpc.getFencedWriteMethod(), request, timeout);
  }

  /** Reads a protected resource. */
  public GetResourceResponse getResource(GetResourceRequest request) {
    return call(OperationRegistryGrpc.getGetResourceMethod(), request, null);
  }

  public GetResourceResponse getResource(GetResourceRequest request, Duration timeout) {
    return call(OperationRegistryGrpc.getGetResourceMethod(), request, timeout);
  }

  public CompletableFuture<GetResourceResponse> getResourceAsync(GetResourceRequest request) {
    return callAsync(OperationRegistryGrpc.getGetResourceMethod(), request, null);
  }

  public CompletableFuture<GetResourceResponse> getResourceAsync(GetResourceRequest request, Duration timeout) {
    return callAsync(OperationRegistryGrpc.getGetResourceMethod(), request, timeout);
  }

  /** Hands due work in one namespace to a worker (see {@link Worker}). */
  public ClaimDueResponse claimDue(ClaimDueRequest request) {
    return call(OperationRegistryGrpc.getClaimDueMethod(), request, null);
  }

  public ClaimDueResponse claimDue(ClaimDueRequest request, Duration timeout) {
    return call(OperationRegistryGrpc.getClaimDueMethod(), request, timeout);
  }

  public CompletableFuture<ClaimDueResponse> claimDueAsync(ClaimDueRequest request) {
    return callAsync(OperationRegistryGrpc.getClaimDueMethod(), request, null);
  }

  public CompletableFuture<ClaimDueResponse> claimDueAsync(ClaimDueRequest request, Duration timeout) {
    return callAsync(OperationRegistryGrpc.getClaimDueMethod(), request, timeout);
  }

  /**
   * Up to 1,000 Claims in one call, each answered as Claim would answer it alone; an entry's error
   * is a {@code google.rpc.Status}: {@link OpregErrors#fromStatus} types it.
   */
  public BatchClaimResponse batchClaim(BatchClaimRequest request) {
    return call(OperationRegistryGrpc.getBatchClaimMethod(), request, null);
  }

  public BatchClaimResponse batchClaim(BatchClaimRequest request, Duration timeout) {
    return call(OperationRegistryGrpc.getBatchClaimMethod(), request, timeout);
  }

  public CompletableFuture<BatchClaimResponse> batchClaimAsync(BatchClaimRequest request) {
    return callAsync(OperationRegistryGrpc.getBatchClaimMethod(), request, null);
  }

  public CompletableFuture<BatchClaimResponse> batchClaimAsync(BatchClaimRequest request, Duration timeout) {
    return callAsync(OperationRegistryGrpc.getBatchClaimMethod(), request, timeout);
  }

  /** Up to 1,000 Completes in one call, answered like {@link #batchClaim}. */
  public BatchCompleteResponse batchComplete(BatchCompleteRequest request) {
    return call(OperationRegistryGrpc.getBatchCompleteMethod(), request, null);
  }

  public BatchCompleteResponse batchComplete(BatchCompleteRequest request, Duration timeout) {
    return call(OperationRegistryGrpc.getBatchCompleteMethod(), request, timeout);
  }

  public CompletableFuture<BatchCompleteResponse> batchCompleteAsync(BatchCompleteRequest request) {
    return callAsync(OperationRegistryGrpc.getBatchCompleteMethod(), request, null);
  }

  public CompletableFuture<BatchCompleteResponse> batchCompleteAsync(BatchCompleteRequest request, Duration timeout) {
    return callAsync(OperationRegistryGrpc.getBatchCompleteMethod(), request, timeout);
  }

  // -- OperationAdmin ------------------------------------------------------------------------

  /** The manual queue: unfinished operations matching every given filter. */
  public ListOperationsResponse listOperations(ListOperationsRequest request) {
    return call(OperationAdminGrpc.getListOperationsMethod(), request, null);
  }

  public CompletableFuture<ListOperationsResponse> listOperationsAsync(ListOperationsRequest request) {
    return callAsync(OperationAdminGrpc.getListOperationsMethod(), request, null);
  }

  /** Records the real outcome of an UNKNOWN, reconciling or DEAD operation. */
  public ResolveOperationResponse resolveOperation(ResolveOperationRequest request) {
    return call(OperationAdminGrpc.getResolveOperationMethod(), request, null);
  }

  public CompletableFuture<ResolveOperationResponse> resolveOperationAsync(ResolveOperationRequest request) {
    return callAsync(OperationAdminGrpc.getResolveOperationMethod(), request, null);
  }

  /** DEAD → RETRY_SCHEDULED, due now, with a fresh retry budget. */
  public RequeueOperationResponse requeueOperation(RequeueOperationRequest request) {
    return call(OperationAdminGrpc.getRequeueOperationMethod(), request, null);
  }

  public CompletableFuture<RequeueOperationResponse> requeueOperationAsync(RequeueOperationRequest request) {
    return callAsync(OperationAdminGrpc.getRequeueOperationMethod(), request, null);
  }

  /** Freezes an operation: Claim answers HELD, ClaimDue skips it. */
  public HoldOperationResponse holdOperation(HoldOperationRequest request) {
    return call(OperationAdminGrpc.getHoldOperationMethod(), request, null);
  }

  public CompletableFuture<HoldOperationResponse> holdOperationAsync(HoldOperationRequest request) {
    return callAsync(OperationAdminGrpc.getHoldOperationMethod(), request, null);
  }

  /** Ends a hold. */
  public ReleaseOperationResponse releaseOperation(ReleaseOperationRequest request) {
    return call(OperationAdminGrpc.getReleaseOperationMethod(), request, null);
  }

  public CompletableFuture<ReleaseOperationResponse> releaseOperationAsync(ReleaseOperationRequest request) {
    return callAsync(OperationAdminGrpc.getReleaseOperationMethod(), request, null);
  }

  // -- the run-once helper -------------------------------------------------------------------

  /**
   * Runs {@code work} at most once per recorded outcome of the operation, by the run-once protocol
   * ({@code client/PROTOCOL.md}): REPLAYED returns the stored {@link Result} ({@code replayed}) or
   * throws the stored {@link BusinessFailureException}; IN_PROGRESS / RETRY_LATER are waited out
   * within the deadline (else {@link DeadlineExceededException}): each Claim asks the server to hold
   * it until the operation moves, and a server that does not wait is polled; DEAD throws {@link
   * OperationDeadException}, HELD {@link OperationHeldException}; RECONCILE calls the reconcile
   * callback (without one the lease is handed back and {@link ReconcileRequiredException} thrown).
   * The work's outcome is recorded (see {@link Work}); while it runs the lease is renewed, and when it
   * is lost {@link LeaseLostException} is thrown without Complete.
   */
  public Result runOnce(RunOptions options, Work work) {
    return new Runner(this, options, Objects.requireNonNull(work, "work")).runOnce();
  }

  /** {@link #runOnce(RunOptions, Work)} with the parameters and the default settings. */
  public Result runOnce(String namespace, String operationKey, Map<String, ?> parameters, Work work) {
    return runOnce(RunOptions.builder(namespace, operationKey).parameters(parameters).build(), work);
  }

  /**
   * {@link #runOnce(RunOptions, Work)} on this client's executor. Cancelling the future stops the
   * renewals and interrupts the work; nothing is reported and the lease lapses at its TTL.
   */
  public CompletableFuture<Result> runOnceAsync(RunOptions options, Work work) {
    Runner runner = new Runner(this, options, Objects.requireNonNull(work, "work"));
    CompletableFuture<Result> future = new CompletableFuture<>() {
      @Override
      public boolean cancel(boolean mayInterruptIfRunning) {
        boolean cancelled = super.cancel(mayInterruptIfRunning);
        if (cancelled) {
          runner.cancel();
        }
        return cancelled;
      }
    };
    executor.execute(() -> {
      try {
        future.complete(runner.runOnce());
      } catch (Throwable error) {
        future.completeExceptionally(error);
      }
    });
    return future;
  }

  /** The executor {@link #runOnceAsync} runs on. */
  ExecutorService executor() {
    return executor;
  }

  // -- calls -----------------------------------------------------------------------------------

  private CallOptions options(Duration timeout) {
    Duration bound = timeout != null ? timeout : defaultTimeout;
    CallOptions options = CallOptions.DEFAULT;
    if (bound != null) {
      options = options.withDeadlineAfter(bound.toNanos(), TimeUnit.NANOSECONDS);
    }
    return options;
  }

  private <Q, R> R call(MethodDescriptor<Q, R> method, Q request, Duration timeout) {
    try {
      return ClientCalls.blockingUnaryCall(channel, method, options(timeout), request);
    } catch (StatusRuntimeException error) {
      throw OpregErrors.fromThrowable(error);
    }
  }

  private <Q, R> CompletableFuture<R> callAsync(MethodDescriptor<Q, R> method, Q request, Duration timeout) {
    ClientCall<Q, R> call = channel.newCall(method, options(timeout));
    CompletableFuture<R> future = new CompletableFuture<>() {
      @Override
      public boolean cancel(boolean mayInterruptIfRunning) {
        boolean cancelled = super.cancel(mayInterruptIfRunning);
        if (cancelled) {
          call.cancel("cancelled by the caller", null);
        }
        return cancelled;
      }
    };
    ClientCalls.asyncUnaryCall(call, request, new StreamObserver<R>() {
      private R value;

      @Override
      public void onNext(R response) {
        value = response;
      }

      @Override
      public void onError(Throwable error) {
        future.completeExceptionally(OpregErrors.fromThrowable(error));
      }

      @Override
      public void onCompleted() {
        future.complete(value);
      }
    });
    return future;
  }

  static java.util.concurrent.ThreadFactory daemonThreads(String prefix) {
    AtomicInteger count = new AtomicInteger();
    return runnable -> {
      Thread thread = new Thread(runnable, prefix + count.incrementAndGet());
      thread.setDaemon(true);
      return thread;
    };
  }

  /** How to reach a server: plaintext or TLS (CA, client certificate), an API key, a default timeout. */
  public static final class Builder {
    private final String host;
    private final int port;
    private boolean tls;
    private byte[] caCertificate;
    private byte[] clientCertificate;
    private byte[] clientKey;
    private String tlsServerName;
    private String apiKey;
    private Duration timeout;
    private ExecutorService executor;

    private Builder(String target) {
      String address = target;
      if (target.startsWith("https://")) {
        tls = true;
        address = target.substring("https://".length());
      } else if (target.startsWith("http://")) {
        address = target.substring("http://".length());
      }
      if (address.endsWith("/")) {
        address = address.substring(0, address.length() - 1);
      }
      URI uri = URI.create("tcp://" + address);
      if (uri.getHost() == null || uri.getPort() < 0) {
        throw new IllegalArgumentException("not host:port: " + target);
      }
      this.host = uri.getHost();
      this.port = uri.getPort();
    }

    /** Speak TLS, checked against the system's roots unless {@link #caCertificate} is given. */
    public Builder tls() {
      this.tls = true;
      return this;
    }

    /** PEM CA certificates the server's certificate must chain to (implies TLS). */
    public Builder caCertificate(byte[] pem) {
      this.caCertificate = pem.clone();
      this.tls = true;
      return this;
    }

    /** A PEM client certificate (chain) and its PEM PKCS#8 key, for mutual TLS (implies TLS). */
    public Builder clientCertificate(byte[] certificatePem, byte[] keyPem) {
      this.clientCertificate = certificatePem.clone();
      this.clientKey = keyPem.clone();
      this.tls = true;
      return this;
    }

    /** The name the server's certificate must carry, when it is not the target's host. */
    public Builder tlsServerName(String name) {
      this.tlsServerName = name;
      return this;
    }

    /** An API key, sent as {@code authorization: Bearer <key>} on every call. */
    public Builder apiKey(String key) {
      if (key.chars().anyMatch(c -> c < 0x20 || c > 0x7e)) {
        throw new IllegalArgumentException("an API key must be printable ASCII");
      }
      this.apiKey = key;
      return this;
    }

    /** The timeout of every call that gives none of its own; default: none. */
    public Builder timeout(Duration timeout) {
      this.timeout = timeout;
      return this;
    }

    /** The executor {@link OpregClient#runOnceAsync} runs on (not shut down by close); default: a cached pool of daemon threads. */
    public Builder executor(ExecutorService executor) {
      this.executor = executor;
      return this;
    }

    public OpregClient build() {
      ChannelCredentials credentials;
      if (tls) {
        TlsChannelCredentials.Builder builder = TlsChannelCredentials.newBuilder();
        try {
          if (caCertificate != null) {
            builder.trustManager(new ByteArrayInputStream(caCertificate));
          }
          if (clientCertificate != null) {
            builder.keyManager(new ByteArrayInputStream(clientCertificate), new ByteArrayInputStream(clientKey));
          }
        } catch (IOException e) {
          throw new UncheckedIOException("unreadable TLS material", e);
        }
        credentials = builder.build();
      } else {
        credentials = InsecureChannelCredentials.create();
      }
      ManagedChannelBuilder<?> builder = Grpc.newChannelBuilderForAddress(host, port, credentials);
      if (tlsServerName != null) {
        builder.overrideAuthority(tlsServerName);
      }
      ManagedChannel channel = builder.build();
      return new OpregClient(channel, channel, apiKey, timeout, executor);
    }
  }

  /** The typed errors of a BatchClaim answer's entries, in order ({@code null} for a claim that was answered). */
  public static List<OpregException> errors(BatchClaimResponse response) {
    return response.getResultsList().stream()
        .map(result -> result.hasError() ? OpregErrors.fromStatus(result.getError()) : null)
        .toList();
  }

  /** The typed errors of a BatchComplete answer's entries, in order ({@code null} for a recorded one). */
  public static List<OpregException> errors(BatchCompleteResponse response) {
    return response.getResultsList().stream()
        .map(result -> result.hasError() ? OpregErrors.fromStatus(result.getError()) : null)
        .toList();
  }
}
