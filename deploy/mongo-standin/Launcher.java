// Starts mongo-java-server, the MongoDB wire-protocol stand-in used for local runs and CI.
//
//   java -cp 'lib/*' Launcher.java [--host H] [--port P] [--h2 FILE] [--exit-on-stdin-eof]
//
// --port 0 (the default) binds a free port. Once listening it prints one line
// "LISTENING mongodb://HOST:PORT" on stdout, so a caller never races for a port.
// --h2 FILE keeps data in an H2 file that survives restarts; without it data lives in memory.
// --exit-on-stdin-eof stops the server when its stdin closes: a test harness that starts it
// through a pipe cannot leave it running, even when the harness itself is killed.
//
// The library's own versions top out at wire version 8 and the Rust driver 3.x needs at least 9,
// so the backend declares MongoDB 6.0 (wire version 17).

import de.bwaldvogel.mongo.MongoBackend;
import de.bwaldvogel.mongo.MongoServer;
import de.bwaldvogel.mongo.MongoVersion;
import de.bwaldvogel.mongo.backend.h2.H2Backend;
import de.bwaldvogel.mongo.backend.memory.MemoryBackend;
import java.net.InetSocketAddress;
import java.util.List;

public class Launcher {
    static final class Mongo60 implements MongoVersion {
        @Override public List<Integer> getVersionArray() { return List.of(6, 0, 0); }
        @Override public int getWireVersion() { return 17; }
    }

    public static void main(String[] args) throws Exception {
        String host = "127.0.0.1";
        int port = 0;
        String h2File = null;
        boolean exitOnEof = false;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--host" -> host = args[++i];
                case "--port" -> port = Integer.parseInt(args[++i]);
                case "--h2" -> h2File = args[++i];
                case "--exit-on-stdin-eof" -> exitOnEof = true;
                default -> {
                    System.err.println("unknown argument: " + args[i]);
                    System.exit(2);
                }
            }
        }

        MongoBackend backend = h2File == null ? new MemoryBackend() : new H2Backend(h2File);
        backend.version(new Mongo60());
        MongoServer server = new MongoServer(backend);
        server.bind(host, port);
        Runtime.getRuntime().addShutdownHook(new Thread(server::shutdown));

        InetSocketAddress addr = server.getLocalAddress();
        System.out.println("LISTENING mongodb://" + host + ":" + addr.getPort());
        System.out.flush();

        if (exitOnEof) {
            while (System.in.read() != -1) { /* discard */ }
            System.exit(0);
        }
        Thread.currentThread().join();
    }
}
