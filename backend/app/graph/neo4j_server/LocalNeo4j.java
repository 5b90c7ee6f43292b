import java.nio.file.Path;
import java.util.Map;
import org.neo4j.configuration.GraphDatabaseSettings;
import org.neo4j.configuration.connectors.BoltConnector;
import org.neo4j.configuration.connectors.HttpConnector;
import org.neo4j.configuration.helpers.SocketAddress;
import org.neo4j.dbms.api.DatabaseManagementService;
import org.neo4j.dbms.api.DatabaseManagementServiceBuilder;
import org.neo4j.io.ByteUnit;

/**
 * A Neo4j Community server for one machine: Bolt on 127.0.0.1 only, authentication on.
 *
 * Arguments: the server's home folder (data and logs go under it), the Bolt port, the page cache
 * in MiB. The password of user neo4j comes from NEO4J_LOCAL_PASSWORD, never from the command line
 * (any local user can read a process's arguments). "READY" on stdout means Bolt accepts the
 * password; SIGTERM shuts the databases down cleanly.
 */
public class LocalNeo4j {
    public static void main(String[] args) throws Exception {
        Path home = Path.of(args[0]);
        int port = Integer.parseInt(args[1]);
        long pageCacheMiB = Long.parseLong(args[2]);
        String password = System.getenv("NEO4J_LOCAL_PASSWORD");
        if (password == null || password.length() < 8) {
            System.err.println("NEO4J_LOCAL_PASSWORD must hold a password of 8 or more characters");
            System.exit(2);
        }
        DatabaseManagementService dbms = new DatabaseManagementServiceBuilder(home)
                .setConfig(BoltConnector.enabled, true)
                .setConfig(BoltConnector.listen_address, new SocketAddress("127.0.0.1", port))
                .setConfig(HttpConnector.enabled, false)
                .setConfig(GraphDatabaseSettings.auth_enabled, true)
                .setConfig(GraphDatabaseSettings.pagecache_memory, ByteUnit.mebiBytes(pageCacheMiB))
                .build();
        Runtime.getRuntime().addShutdownHook(new Thread(dbms::shutdown));
        setPassword(dbms, password);
        System.out.println("READY bolt://127.0.0.1:" + port);
        System.out.flush();
        Thread.currentThread().join();
    }

    /** The system database keeps the password across starts; setting the same one again is refused. */
    private static void setPassword(DatabaseManagementService dbms, String password) {
        try {
            dbms.database("system").executeTransactionally(
                    "ALTER USER neo4j SET PASSWORD $password CHANGE NOT REQUIRED", Map.of("password", password));
        } catch (RuntimeException error) {
            if (!String.valueOf(error.getMessage()).contains("cannot be the same")) {
                throw error;
            }
        }
    }
}
