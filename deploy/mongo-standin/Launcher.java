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
// The library answers a filter from the `_id` index only when the filter is exactly one
// equality on `_id`; `{_id: X, status: S, seq: N}` scanned the whole collection, so every
// conditional update slowed down as a collection grew (~3,200/s at 1,000 documents, ~480/s at
// 10,000). MongoDB answers such a filter from the `_id` index and checks the other fields on
// the one document it finds; the IdIndexed* classes below do the same for both backends (the
// memory one of tests and benchmarks, the H2 one of `up` and the fault suite), so tests and
// benchmarks measure the service rather than the stand-in's scans, and a long-lived `up` does
// not slow down as its predictions accumulate.

import de.bwaldvogel.mongo.MongoBackend;
import de.bwaldvogel.mongo.MongoCollection;
import de.bwaldvogel.mongo.MongoDatabase;
import de.bwaldvogel.mongo.MongoServer;
import de.bwaldvogel.mongo.MongoVersion;
import de.bwaldvogel.mongo.backend.CollectionOptions;
import de.bwaldvogel.mongo.backend.CursorRegistry;
import de.bwaldvogel.mongo.backend.Index;
import de.bwaldvogel.mongo.backend.QueryResult;
import de.bwaldvogel.mongo.backend.h2.H2Backend;
import de.bwaldvogel.mongo.backend.h2.H2Collection;
import de.bwaldvogel.mongo.backend.h2.H2Database;
import de.bwaldvogel.mongo.backend.memory.MemoryBackend;
import de.bwaldvogel.mongo.backend.memory.MemoryCollection;
import de.bwaldvogel.mongo.backend.memory.MemoryDatabase;
import de.bwaldvogel.mongo.bson.Document;
import java.net.InetSocketAddress;
import org.h2.mvstore.MVMap;
import org.h2.mvstore.MVStore;
import java.util.List;
import java.util.function.Function;
import java.util.function.Supplier;

public class Launcher {
    static final class Mongo60 implements MongoVersion {
        @Override public List<Integer> getVersionArray() { return List.of(6, 0, 0); }
        @Override public int getWireVersion() { return 17; }
    }

    /**
     * How both backends' collections plan a query: when it holds an `_id` equality beside other
     * fields, `match` checks the whole filter on the document the `_id` index finds (if any);
     * otherwise `plan` leaves it to the library. The two collections extend different library
     * classes, so each passes its own protected `matchDocuments` and `super.queryDocuments`.
     */
    static <P> QueryResult queryById(List<Index<P>> indexes, Document query,
                                     Function<Iterable<P>, QueryResult> match, Supplier<QueryResult> plan) {
        Object id = query.get("_id");
        // A plain value is an equality; an operator document ($in, $gt, ...) is left to the library.
        if (query.size() < 2 || id == null || id instanceof Document) {
            return plan.get();
        }
        Document byId = new Document("_id", id);
        for (Index<P> index : indexes) {
            if (index.canHandle(byId)) {
                return match.apply(index.getPositions(byId));
            }
        }
        return plan.get();
    }

    /** A memory collection that finds a document by an `_id` equality first, whatever else the filter holds. */
    static final class IdIndexedCollection extends MemoryCollection {
        IdIndexedCollection(MongoDatabase database, String name, CollectionOptions options, CursorRegistry cursors) {
            super(database, name, options, cursors);
        }

        @Override
        protected QueryResult queryDocuments(Document query, Document orderBy, int skip, int limit, int batchSize,
                                             Document fields) {
            return queryById(getIndexes(), query,
                found -> matchDocuments(query, found, orderBy, skip, limit, batchSize, fields),
                () -> super.queryDocuments(query, orderBy, skip, limit, batchSize, fields));
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

    /** The same for the H2 file backend (`up`, the fault suite). */
    static final class IdIndexedH2Collection extends H2Collection {
        IdIndexedH2Collection(MongoDatabase database, String name, CollectionOptions options,
                              MVMap<Object, Document> data, MVMap<String, Object> meta, CursorRegistry cursors) {
            super(database, name, options, data, meta, cursors);
        }

        @Override
        protected QueryResult queryDocuments(Document query, Document orderBy, int skip, int limit, int batchSize,
                                             Document fields) {
            return queryById(getIndexes(), query,
                found -> matchDocuments(query, found, orderBy, skip, limit, batchSize, fields),
                () -> super.queryDocuments(query, orderBy, skip, limit, batchSize, fields));
        }
    }

    /**
     * Opens its collections as H2Database does (the same map names, so files written before
     * still open). The library's database keeps its store private and opens collections from
     * its own constructor, so the store is the launcher's one, in a static field.
     */
    static final class IdIndexedH2Database extends H2Database {
        static MVStore store;

        IdIndexedH2Database(String name, CursorRegistry cursors) { super(name, store, cursors); }

        @Override
        protected MongoCollection<Object> openOrCreateCollection(String name, CollectionOptions options) {
            String fullName = getFullCollectionNamespace(name);
            MVMap<Object, Document> data = store.openMap("databases." + fullName);
            MVMap<String, Object> meta = store.openMap("meta." + fullName);
            return new IdIndexedH2Collection(this, name, options, data, meta, cursorRegistry);
        }
    }

    static final class IdIndexedH2Backend extends H2Backend {
        IdIndexedH2Backend(MVStore store) { super(store); }

        @Override
        protected MongoDatabase openOrCreateDatabase(String name) {
            return new IdIndexedH2Database(name, getCursorRegistry());
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

        MongoBackend backend;
        if (h2File == null) {
            backend = new IdIndexedBackend();
        } else {
            IdIndexedH2Database.store = MVStore.open(h2File);
            backend = new IdIndexedH2Backend(IdIndexedH2Database.store);
        }
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
