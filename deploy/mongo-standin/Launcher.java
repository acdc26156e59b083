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
//
// The memory backend answers a filter from the `_id` index only when the filter is exactly one
// equality on `_id`; `{_id: X, status: S, seq: N}` scanned the whole collection, so every
// conditional update slowed down as a collection grew (~3,200/s at 1,000 documents, ~480/s at
// 10,000). MongoDB answers such a filter from the `_id` index and checks the other fields on
// the one document it finds; IdIndexedCollection does the same, so tests and benchmarks measure
// the service rather than the stand-in's scans. The H2 backend (`up`) is left as the library has it.

import de.bwaldvogel.mongo.MongoBackend;
import de.bwaldvogel.mongo.MongoDatabase;
import de.bwaldvogel.mongo.MongoServer;
import de.bwaldvogel.mongo.MongoVersion;
import de.bwaldvogel.mongo.backend.CollectionOptions;
import de.bwaldvogel.mongo.backend.CursorRegistry;
import de.bwaldvogel.mongo.backend.Index;
import de.bwaldvogel.mongo.backend.QueryResult;
import de.bwaldvogel.mongo.backend.h2.H2Backend;
import de.bwaldvogel.mongo.backend.memory.MemoryBackend;
import de.bwaldvogel.mongo.backend.memory.MemoryCollection;
import de.bwaldvogel.mongo.backend.memory.MemoryDatabase;
import de.bwaldvogel.mongo.bson.Document;
import java.net.InetSocketAddress;
import java.util.List;

public class Launcher {
    static final class Mongo60 implements MongoVersion {
        @Override public List<Integer> getVersionArray() { return List.of(6, 0, 0); }
        @Override public int getWireVersion() { return 17; }
    }

    /** A memory collection that finds a document by an `_id` equality first, whatever else the filter holds. */
    static final class IdIndexedCollection extends MemoryCollection {
        IdIndexedCollection(MongoDatabase database, String name, CollectionOptions options, CursorRegistry cursors) {
            super(database, name, options, cursors);
        }

        @Override
        protected QueryResult queryDocuments(Document query, Document orderBy, int skip, int limit, int batchSize,
                                             Document fieldSelector) {
            Object id = query.get("_id");
            // A plain value is an equality; an operator document ($in, $gt, ...) is left to the library.
            if (query.size() > 1 && id != null && !(id instanceof Document)) {
                Document byId = new Document("_id", id);
                for (Index<Integer> index : getIndexes()) {
                    if (index.canHandle(byId)) {
                        // The one document with this _id, if any, still has to match the whole filter.
                        return matchDocuments(query, index.getPositions(byId), orderBy, skip, limit, batchSize,
                            fieldSelector);
                    }
                }
            }
            return super.queryDocuments(query, orderBy, skip, limit, batchSize, fieldSelector);
        }
    }

    static final class IdIndexedDatabase extends MemoryDatabase {
        IdIndexedDatabase(String name, CursorRegistry cursors) { super(name, cursors); }

        @Override
        protected MemoryCollection openOrCreateCollection(String name, CollectionOptions options) {
            return new IdIndexedCollection(this, name, options, cursorRegistry);
        }
    }

    static final class IdIndexedBackend extends MemoryBackend {
        @Override
        public MemoryDatabase openOrCreateDatabase(String name) {
            return new IdIndexedDatabase(name, getCursorRegistry());
        }
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

        MongoBackend backend = h2File == null ? new IdIndexedBackend() : new H2Backend(h2File);
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
