package opreg

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	opregv1 "github.com/opreg/opreg/client/go/gen/opreg/v1"
)

// Client is an opreg client: one method per RPC of OperationRegistry and
// OperationAdmin (one connection for both), each returning the typed errors
// of [FromError], and the run-once helper ([Client.RunOnce]). It is safe for
// concurrent use; Close it when done.
type Client struct {
	conn     *grpc.ClientConn
	registry opregv1.OperationRegistryClient
	admin    opregv1.OperationAdminClient
}

// Option configures [Dial].
type Option func(*dialConfig)

type dialConfig struct {
	tls         bool
	caPEM       []byte
	certPEM     []byte
	keyPEM      []byte
	serverName  string
	tlsConfig   *tls.Config
	creds       credentials.TransportCredentials
	apiKey      string
	dialOptions []grpc.DialOption
}

// WithTLS speaks TLS, checking the server against the system's roots unless
// [WithCACert] is given. Implied by any other TLS option and by an
// "https://" address.
func WithTLS() Option { return func(c *dialConfig) { c.tls = true } }

// WithCACert trusts the PEM CA certificates the server's certificate must chain to.
func WithCACert(pem []byte) Option {
	return func(c *dialConfig) { c.tls, c.caPEM = true, pem }
}

// WithClientCert presents a PEM client certificate and its key (mutual TLS).
func WithClientCert(certPEM, keyPEM []byte) Option {
	return func(c *dialConfig) { c.tls, c.certPEM, c.keyPEM = true, certPEM, keyPEM }
}

// WithServerName is the name the server's certificate must carry, when it is
// not the address's host.
func WithServerName(name string) Option {
	return func(c *dialConfig) { c.tls, c.serverName = true, name }
}

// WithTLSConfig uses this TLS configuration (the other TLS options then only
// add to a clone of it).
func WithTLSConfig(config *tls.Config) Option {
	return func(c *dialConfig) { c.tls, c.tlsConfig = true, config }
}

// WithTransportCredentials replaces every TLS setting.
func WithTransportCredentials(creds credentials.TransportCredentials) Option {
	return func(c *dialConfig) { c.creds = creds }
}

// WithAPIKey sends the key as "authorization: Bearer <key>" on every call.
func WithAPIKey(key string) Option { return func(c *dialConfig) { c.apiKey = key } }

// WithDialOptions adds gRPC dial options.
func WithDialOptions(options ...grpc.DialOption) Option {
	return func(c *dialConfig) { c.dialOptions = append(c.dialOptions, options...) }
}

// Dial makes a client for address: "host:port" (plaintext unless a TLS option
// is given), "http://host:port" or "https://host:port" (TLS). It does not wait
// for the connection: a server that is not up yet shows as an
// [UnavailableError] on the first call. ctx is only checked, not kept.
func Dial(ctx context.Context, address string, options ...Option) (*Client, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	config := &dialConfig{}
	for _, option := range options {
		option(config)
	}
	target := address
	switch {
	case strings.HasPrefix(address, "https://"):
		config.tls = true
		target = strings.TrimPrefix(address, "https://")
	case strings.HasPrefix(address, "http://"):
		target = strings.TrimPrefix(address, "http://")
	}
	target = strings.TrimSuffix(target, "/")
	creds, err := config.transportCredentials()
	if err != nil {
		return nil, err
	}
	dialOptions := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		// Reconnect quickly after the server comes back (the default grows to 120 s).
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 200 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
			MinConnectTimeout: 20 * time.Second, // gRPC's default; calls are bounded by their own deadlines
		}),
		grpc.WithChainUnaryInterceptor(callMetadata(config.apiKey)),
	}
	dialOptions = append(dialOptions, config.dialOptions...)
	conn, err := grpc.NewClient(target, dialOptions...)
	if err != nil {
		return nil, fmt.Errorf("opreg: dial %s: %w", address, err)
	}
	return NewClient(conn), nil
}

// NewClient is a client over a connection made elsewhere (its interceptors
// then carry any API key). Close closes the connection.
func NewClient(conn *grpc.ClientConn) *Client {
	return &Client{
		conn:     conn,
		registry: opregv1.NewOperationRegistryClient(conn),
		admin:    opregv1.NewOperationAdminClient(conn),
	}
}

func (c *dialConfig) transportCredentials() (credentials.TransportCredentials, error) {
	if c.creds != nil {
		return c.creds, nil
	}
	if !c.tls {
		return insecure.NewCredentials(), nil
	}
	config := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.tlsConfig != nil {
		config = c.tlsConfig.Clone()
	}
	if c.caPEM != nil {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(c.caPEM) {
			return nil, errors.New("opreg: the CA certificate is not PEM")
		}
		config.RootCAs = pool
	}
	if (c.certPEM == nil) != (c.keyPEM == nil) {
		return nil, errors.New("opreg: give the client certificate and its key together")
	}
	if c.certPEM != nil {
		pair, err := tls.X509KeyPair(c.certPEM, c.keyPEM)
		if err != nil {
			return nil, fmt.Errorf("opreg: client certificate: %w", err)
		}
		config.Certificates = append(config.Certificates, pair)
	}
	if c.serverName != "" {
		config.ServerName = c.serverName
	}
	return credentials.NewTLS(config), nil
}

// callMetadata adds to every call the API key (sent per call rather than as
// call credentials, which gRPC refuses on a plaintext connection, e.g. a
// loopback server with a policy) and the W3C trace context (traceparent,
// tracestate) of the OpenTelemetry span in the call's context, if any.
func callMetadata(apiKey string) grpc.UnaryClientInterceptor {
	traceContext := propagation.TraceContext{}
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		var pairs []string
		if apiKey != "" {
			pairs = append(pairs, "authorization", "Bearer "+apiKey)
		}
		carrier := propagation.MapCarrier{}
		traceContext.Inject(ctx, carrier)
		for _, key := range carrier.Keys() {
			pairs = append(pairs, key, carrier.Get(key))
		}
		if len(pairs) > 0 {
			ctx = metadata.AppendToOutgoingContext(ctx, pairs...)
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// Conn is the client's gRPC connection.
func (c *Client) Conn() *grpc.ClientConn { return c.conn }

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Claim registers an operation, or tells the caller what to do about an
// existing one. Build the fingerprint with [Struct] or [ParametersDigest].
func (c *Client) Claim(ctx context.Context, req *opregv1.ClaimRequest, opts ...grpc.CallOption) (*opregv1.ClaimResponse, error) {
	resp, err := c.registry.Claim(ctx, req, opts...)
	if err != nil {
		return nil, FromError(err)
	}
	return resp, nil
}

// Complete records the outcome of the execution holding the fencing token.
// Repeating the same report is safe.
func (c *Client) Complete(ctx context.Context, req *opregv1.CompleteRequest, opts ...grpc.CallOption) (*opregv1.CompleteResponse, error) {
	resp, err := c.registry.Complete(ctx, req, opts...)
	if err != nil {
		return nil, FromError(err)
	}
	return resp, nil
}

// Lookup reads an operation and, optionally, its executions, parameters and audit.
func (c *Client) Lookup(ctx context.Context, req *opregv1.LookupRequest, opts ...grpc.CallOption) (*opregv1.LookupResponse, error) {
	resp, err := c.registry.Lookup(ctx, req, opts...)
	if err != nil {
		return nil, FromError(err)
	}
	return resp, nil
}

// Renew extends the lease of the current holder.
func (c *Client) Renew(ctx context.Context, req *opregv1.RenewRequest, opts ...grpc.CallOption) (*opregv1.RenewResponse, error) {
	resp, err := c.registry.Renew(ctx, req, opts...)
	if err != nil {
		return nil, FromError(err)
	}
	return resp, nil
}

// FencedWrite writes a protected resource, refusing superseded fencing tokens
// ([StaleFencingTokenError]).
func (c *Client) FencedWrite(ctx context.Context, req *opregv1.FencedWriteRequest, opts ...grpc.CallOption) (*opregv1.FencedWriteResponse, error) {
	resp, err := c.registry.FencedWrite(ctx, req, opts...)
	if err != nil {
		return nil, FromError(err)
	}
	return resp, nil
}

// GetResource reads a protected resource.
func (c *Client) GetResource(ctx context.Context, req *opregv1.GetResourceRequest, opts ...grpc.CallOption) (*opregv1.GetResourceResponse, error) {
	resp, err := c.registry.GetResource(ctx, req, opts...)
	if err != nil {
		return nil, FromError(err)
	}
	return resp, nil
}

// ClaimDue hands due work in one namespace to a worker (see [Worker]).
func (c *Client) ClaimDue(ctx context.Context, req *opregv1.ClaimDueRequest, opts ...grpc.CallOption) (*opregv1.ClaimDueResponse, error) {
	resp, err := c.registry.ClaimDue(ctx, req, opts...)
	if err != nil {
		return nil, FromError(err)
	}
	return resp, nil
}

// BatchClaim makes up to 1,000 Claims in one call; decode a result's error
// with [ErrorFromStatus].
func (c *Client) BatchClaim(ctx context.Context, req *opregv1.BatchClaimRequest, opts ...grpc.CallOption) (*opregv1.BatchClaimResponse, error) {
	resp, err := c.registry.BatchClaim(ctx, req, opts...)
	if err != nil {
		return nil, FromError(err)
	}
	return resp, nil
}

// BatchComplete makes up to 1,000 Completes in one call, answered like BatchClaim.
func (c *Client) BatchComplete(ctx context.Context, req *opregv1.BatchCompleteRequest, opts ...grpc.CallOption) (*opregv1.BatchCompleteResponse, error) {
	resp, err := c.registry.BatchComplete(ctx, req, opts...)
	if err != nil {
		return nil, FromError(err)
	}
	return resp, nil
}

// ListOperations (OperationAdmin) is one page of the manual queue.
func (c *Client) ListOperations(ctx context.Context, req *opregv1.ListOperationsRequest, opts ...grpc.CallOption) (*opregv1.ListOperationsResponse, error) {
	resp, err := c.admin.ListOperations(ctx, req, opts...)
	if err != nil {
		return nil, FromError(err)
	}
	return resp, nil
}

// ResolveOperation (OperationAdmin) records the real outcome of an UNKNOWN,
// reconciling or DEAD operation.
func (c *Client) ResolveOperation(ctx context.Context, req *opregv1.ResolveOperationRequest, opts ...grpc.CallOption) (*opregv1.ResolveOperationResponse, error) {
	resp, err := c.admin.ResolveOperation(ctx, req, opts...)
	if err != nil {
		return nil, FromError(err)
	}
	return resp, nil
}

// RequeueOperation (OperationAdmin) turns a DEAD operation into a due retry
// with a fresh budget.
func (c *Client) RequeueOperation(ctx context.Context, req *opregv1.RequeueOperationRequest, opts ...grpc.CallOption) (*opregv1.RequeueOperationResponse, error) {
	resp, err := c.admin.RequeueOperation(ctx, req, opts...)
	if err != nil {
		return nil, FromError(err)
	}
	return resp, nil
}

// HoldOperation (OperationAdmin) freezes an operation: Claim answers HELD.
func (c *Client) HoldOperation(ctx context.Context, req *opregv1.HoldOperationRequest, opts ...grpc.CallOption) (*opregv1.HoldOperationResponse, error) {
	resp, err := c.admin.HoldOperation(ctx, req, opts...)
	if err != nil {
		return nil, FromError(err)
	}
	return resp, nil
}

// ReleaseOperation (OperationAdmin) ends a hold.
func (c *Client) ReleaseOperation(ctx context.Context, req *opregv1.ReleaseOperationRequest, opts ...grpc.CallOption) (*opregv1.ReleaseOperationResponse, error) {
	resp, err := c.admin.ReleaseOperation(ctx, req, opts...)
	if err != nil {
		return nil, FromError(err)
	}
	return resp, nil
}
