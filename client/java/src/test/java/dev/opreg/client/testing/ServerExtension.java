package dev.opreg.client.testing;

import org.junit.jupiter.api.extension.ExtensionContext;
import org.junit.jupiter.api.extension.ParameterContext;
import org.junit.jupiter.api.extension.ParameterResolver;

/**
 * One real opreg-server for the whole test run: started by the first test that asks for a {@link
 * TestServer} parameter, kept in the root store, and stopped (SIGTERM) when the run ends.
 */
public final class ServerExtension implements ParameterResolver {
  @Override
  public boolean supportsParameter(ParameterContext parameter, ExtensionContext context) {
    return parameter.getParameter().getType() == TestServer.class;
  }

  @Override
  public Object resolveParameter(ParameterContext parameter, ExtensionContext context) {
    return shared(context);
  }

  /** The run's server. */
  public static TestServer shared(ExtensionContext context) {
    return context.getRoot()
        .getStore(ExtensionContext.Namespace.create(ServerExtension.class))
        .getOrComputeIfAbsent("server", key -> TestServer.start(), TestServer.class);
  }
}
