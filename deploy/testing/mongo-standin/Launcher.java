// Starts mongo-java-server, the MongoDB wire-protocol stand-in used for local runs and CI.
//
//   java -cp '<classes>:lib/*' Launcher [--host H] [--port P] [--h2 FILE] [--exit-on-stdin-eof]
//
// deploy/local/install compiles it into <classes> (a directory per version of this source) and
// puts that on the stand-in's classpath; `java ... Launcher.java` runs the source as well, but
// compiles it at every start.
// --port 0 (the default) binds a free port. Once listening it prints one line
// "LISTENING mongodb://HOST:PORT" on stdout, so a caller never races for a port.
// --h2 FILE keeps data in an H2 file that survives restarts; without it data lives in memory.
// Opening a file reads the summaries of its documents into memory (see Summaries), which takes
// time and memory in proportion to the data: the launcher prints "OPENING FILE BYTES", then
// "PROGRESS ..." as it opens each collection, so a caller can wait for progress rather than for
// a fixed time. A file whose live data fills less than half of it (after retention removed
// much) is compacted first ("PROGRESS compacting ..."), and a stop compacts it for up to 10 s,
// so the file stays bounded by what is kept.
// MONGO_STANDIN_SPEEDUPS=off leaves out every speed-up (the Faithful* classes: the library's
// own collections with the fidelity shims below), to measure what they save (README.md).
// --exit-on-stdin-eof stops the server when its stdin closes: a test harness that starts it
// through a pipe cannot leave it running, even when the harness itself is killed.
//
// The library's own versions top out at wire version 8 and the Rust driver 3.x needs at least 9,
// so the backend declares MongoDB 6.0 (wire version 17).
//
// The speed-ups (IdIndexed*, Summaries, ValueIndex, KeyOrder) are in Speedups.java.
//
// Behaviours of real MongoDB that the library lacks, so tests can hold the service to them:
// - An update whose resulting document passes 16 MiB is refused with error 17419 and changes
//   nothing (the library stored it). See Limits.
// - An index requested with the keys (or the name) of an existing one but other options is
//   refused with error 85 (IndexOptionsConflict), or 86 (IndexKeySpecsConflict) for a name
//   with other keys; the library accepted it silently. See Limits.checkIndexes.
// - The `failCommand` failpoint of MongoDB's test commands (`configureFailPoint`, as mongod
//   started with enableTestCommands=1 takes it): fail the next N commands of the named kinds,
//   optionally only those of one client `appName`, with an error code, a closed connection or a
//   write concern error after the command ran, or hold the command's connection for a while
//   (`blockConnection`, `blockTimeMS`); `waitForFailPoint` waits until it has been entered.
//   Tests inject a primary's stepdown with it. See FailPoint.
// - Each connection's commands run apart, as mongod's thread per connection runs them: one
//   slow command holds its own connection, never another (the library's server shared a few
//   event loops among all connections). See Server.

import de.bwaldvogel.mongo.MongoBackend;
import de.bwaldvogel.mongo.MongoCollection;
import de.bwaldvogel.mongo.MongoDatabase;
import de.bwaldvogel.mongo.MongoVersion;
import de.bwaldvogel.mongo.backend.CollectionOptions;
import de.bwaldvogel.mongo.backend.CursorRegistry;
import de.bwaldvogel.mongo.backend.EmptyIndex;
import de.bwaldvogel.mongo.backend.Index;
import de.bwaldvogel.mongo.backend.IndexKey;
import de.bwaldvogel.mongo.backend.KeyValue;
import de.bwaldvogel.mongo.backend.QueryResult;
import de.bwaldvogel.mongo.backend.ValueComparator;
import de.bwaldvogel.mongo.backend.h2.H2Backend;
import de.bwaldvogel.mongo.backend.h2.H2Collection;
import de.bwaldvogel.mongo.backend.h2.H2Database;
import de.bwaldvogel.mongo.backend.memory.MemoryBackend;
import de.bwaldvogel.mongo.backend.memory.MemoryCollection;
import de.bwaldvogel.mongo.backend.memory.MemoryDatabase;
import de.bwaldvogel.mongo.bson.Document;
import de.bwaldvogel.mongo.exception.MongoServerError;
import de.bwaldvogel.mongo.wire.MongoDatabaseHandler;
import de.bwaldvogel.mongo.wire.MongoExceptionHandler;
import de.bwaldvogel.mongo.wire.MongoWireMessageEncoder;
import de.bwaldvogel.mongo.wire.MongoWireProtocolHandler;
import de.bwaldvogel.mongo.wire.MongoWireReplyEncoder;
import de.bwaldvogel.mongo.wire.bson.BsonEncoder;
import io.netty.buffer.ByteBuf;
import io.netty.buffer.Unpooled;
import io.netty.bootstrap.ServerBootstrap;
import io.netty.channel.Channel;
import io.netty.channel.ChannelInitializer;
import io.netty.channel.ChannelOption;
import io.netty.channel.EventLoopGroup;
import io.netty.channel.group.ChannelGroup;
import io.netty.channel.group.DefaultChannelGroup;
import io.netty.channel.MultiThreadIoEventLoopGroup;
import io.netty.channel.nio.NioIoHandler;
import io.netty.channel.socket.SocketChannel;
import io.netty.channel.socket.nio.NioServerSocketChannel;
import io.netty.util.concurrent.DefaultThreadFactory;
import io.netty.util.concurrent.EventExecutor;
import io.netty.util.concurrent.EventExecutorChooserFactory;
import io.netty.util.concurrent.GlobalEventExecutor;
import io.netty.util.concurrent.ThreadPerTaskExecutor;
import io.netty.util.AttributeKey;
import java.net.InetSocketAddress;
import org.h2.mvstore.MVMap;
import org.h2.mvstore.MVStore;
import org.h2.mvstore.type.ObjectDataType;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicIntegerArray;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.function.Function;
import java.util.function.IntConsumer;
import java.util.function.Supplier;

public class Launcher {
    static final class Mongo60 implements MongoVersion {
        @Override public List<Integer> getVersionArray() { return List.of(6, 0, 0); }
        @Override public int getWireVersion() { return 17; }
    }

    /** MongoDB's document size limit, which the library checks only on documents it decodes. */
    static final class Limits {
        static final int MAX_DOCUMENT_BYTES = 16 * 1024 * 1024;

        static int size(Document document) {
            ByteBuf buffer = Unpooled.buffer();
            try {
                BsonEncoder.encodeDocument(document, buffer);
                return buffer.writerIndex();
            } finally {
                buffer.release();
            }
        }

        /**
         * Called where the library has already applied an update to the stored `document` and
         * its indexes: when the result passes 16 MiB, puts both back as they were and refuses
         * the update as MongoDB does (error 17419), so nothing of it is kept.
         */
        static <P> void checkUpdate(MongoCollection<P> collection, List<Index<P>> indexes, P position,
                                    Document oldDocument, Document document, IntConsumer dataSize) {
            int newSize = size(document);
            if (newSize <= MAX_DOCUMENT_BYTES) {
                return;
            }
            Document updated = document.cloneDeeply();
            for (Index<P> index : indexes) {
                index.updateInPlace(updated, oldDocument, position, collection);
            }
            document.clear();
            document.putAll(oldDocument);
            dataSize.accept(size(oldDocument) - newSize);
            throw new MongoServerError(17419,
                "Resulting document after update is larger than " + MAX_DOCUMENT_BYTES);
        }
    }

    /** Index requests that conflict with existing indexes, refused as MongoDB refuses them. */
    static final class IndexConflicts {
        /** The options two indexes with the same keys must share. */
        static final List<String> OPTIONS = List.of("unique", "sparse", "expireAfterSeconds", "partialFilterExpression");

        /** Handles a `createIndexes` command: refused if it conflicts, else run. */
        static Document check(Document query, Function<String, List<?>> existing, Supplier<Document> run) {
            List<?> current;
            try {
                current = existing.apply((String) query.get("createIndexes"));
            } catch (RuntimeException e) {
                return run.get(); // no such collection yet: nothing to conflict with
            }
            if (current != null && query.get("indexes") instanceof List<?> requested) {
                for (Object r : requested) {
                    for (Object e : current) {
                        if (r instanceof Document want && e instanceof Document have) {
                            conflict(want, have);
                        }
                    }
                }
            }
            return run.get();
        }

        static void conflict(Document want, Document have) {
            boolean sameName = want.get("name") != null && want.get("name").equals(have.get("name"));
            boolean sameKeys = String.valueOf(want.get("key")).equals(String.valueOf(have.get("key")));
            if (sameName && !sameKeys) {
                throw new MongoServerError(86, "IndexKeySpecsConflict",
                    "An existing index has the same name as the requested index but different keys: " + have);
            }
            if (!sameKeys) {
                return;
            }
            for (String option : OPTIONS) {
                if (!String.valueOf(number(want.get(option))).equals(String.valueOf(number(have.get(option))))) {
                    throw new MongoServerError(85, "IndexOptionsConflict",
                        "An equivalent index already exists with a different name or options: " + have);
                }
            }
        }

        /** Numbers of any width compare as longs; false and absent are the same. */
        static Object number(Object value) {
            if (value instanceof Number n) return n.longValue();
            if (Boolean.FALSE.equals(value)) return null;
            return value;
        }
    }

    /** The `failCommand` failpoint of mongod's test commands (see the top of this file). */
    static final class FailPoint {
        static final AttributeKey<String> APP_NAME = AttributeKey.valueOf("appName");
        private static Document data;
        private static int remaining;

        /** Handles `command` of `channel`, failing it if the failpoint says so. */
        static Document handle(Channel channel, String command, Document query, Supplier<Document> run) {
            if (command.equalsIgnoreCase("ismaster") || command.equals("hello")) {
                Object client = query.get("client");
                if (client instanceof Document c && c.get("application") instanceof Document app
                    && app.get("name") instanceof String name) {
                    channel.attr(APP_NAME).set(name);
                }
            }
            if (command.equals("configureFailPoint")) {
                return configure(query);
            }
            if (command.equals("waitForFailPoint")) {
                return waitFor(query);
            }
            Document failing = take(channel.attr(APP_NAME).get(), command);
            if (failing != null && Boolean.TRUE.equals(failing.get("blockConnection"))) {
                // Holds this connection, and only it, for blockTimeMS; then fails as asked, or
                // runs the command when nothing else is asked (as mongod does).
                try {
                    Thread.sleep(((Number) failing.getOrDefault("blockTimeMS", 0)).longValue());
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
                if (failing.get("errorCode") == null && failing.get("closeConnection") == null
                    && failing.get("writeConcernError") == null) {
                    failing = null;
                }
            }
            if (failing == null) {
                Document reply = run.get();
                // mongod's `hello` says the server's time (`localTime`); the library's does not.
                if (command.equalsIgnoreCase("ismaster") || command.equals("hello")) {
                    reply.putIfAbsent("localTime", new java.util.Date());
                }
                return reply;
            }
            if (Boolean.TRUE.equals(failing.get("closeConnection"))) {
                channel.close();
                return new Document("ok", 0);
            }
            if (failing.get("writeConcernError") instanceof Document concern) {
                Document reply = run.get();
                reply.put("writeConcernError", concern);
                if (failing.get("errorLabels") != null) reply.put("errorLabels", failing.get("errorLabels"));
                return reply;
            }
            Document reply = new Document("ok", 0);
            reply.put("errmsg", "Failing command via 'failCommand' failpoint");
            reply.put("code", ((Number) failing.getOrDefault("errorCode", 1)).intValue());
            if (failing.get("errorLabels") != null) reply.put("errorLabels", failing.get("errorLabels"));
            return reply;
        }

        /** `{configureFailPoint: "failCommand", mode: "off" | "alwaysOn" | {times: N}, data: {...}}` */
        static synchronized Document configure(Document query) {
            if (!"failCommand".equals(query.get("configureFailPoint"))) {
                throw new MongoServerError(2, "only the failCommand failpoint is known");
            }
            Object mode = query.get("mode");
            Document reply = new Document("count", remaining);
            if ("off".equals(mode)) {
                data = null;
                remaining = 0;
            } else if ("alwaysOn".equals(mode)) {
                data = (Document) query.get("data");
                remaining = -1;
            } else if (mode instanceof Document m && m.get("times") instanceof Number times) {
                data = (Document) query.get("data");
                remaining = times.intValue();
            } else {
                throw new MongoServerError(2, "mode must be off, alwaysOn or {times: N}");
            }
            reply.put("ok", 1.0);
            return reply;
        }

        /**
         * `{waitForFailPoint: "failCommand", timesEntered: N, maxTimeMS: M}`: answers once the
         * failpoint has been entered N times since the stand-in started, or fails with
         * MaxTimeMSExpired (50) after M ms, as mongod's test command does.
         */
        static synchronized Document waitFor(Document query) {
            if (!"failCommand".equals(query.get("waitForFailPoint"))) {
                throw new MongoServerError(2, "only the failCommand failpoint is known");
            }
            long times = ((Number) query.getOrDefault("timesEntered", 1)).longValue();
            long until = System.currentTimeMillis() + ((Number) query.getOrDefault("maxTimeMS", 30_000)).longValue();
            while (entered < times) {
                long left = until - System.currentTimeMillis();
                if (left <= 0) {
                    throw new MongoServerError(50, "MaxTimeMSExpired", "the failpoint was entered " + entered + " times");
                }
                try {
                    FailPoint.class.wait(left);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    throw new MongoServerError(11601, "Interrupted", "interrupted");
                }
            }
            return new Document("ok", 1.0);
        }

        /** How many commands the failpoint has taken since the stand-in started. */
        private static long entered;

        /** The failpoint's data if it fails this command now (counting it down), else null. */
        private static synchronized Document take(String appName, String command) {
            if (data == null || remaining == 0) {
                return null;
            }
            Object commands = data.get("failCommands");
            if (!(commands instanceof List<?> names) || !names.contains(command)) {
                return null;
            }
            Object app = data.get("appName");
            if (app != null && !app.equals(appName)) {
                return null;
            }
            entered++;
            FailPoint.class.notifyAll();
            if (remaining > 0 && --remaining == 0) {
                Document last = data;
                data = null;
                return last;
            }
            return data;
        }
    }

    /**
     * Whether the speed-ups run (the IdIndexed* classes with Summaries, ValueIndex and KeyOrder).
     * `MONGO_STANDIN_SPEEDUPS=off` starts the library's own collections with the fidelity shims
     * alone (the Faithful* classes below): every answer is the same, only slower, which is how
     * what each speed-up saves the test suite is measured (README.md) and how a test's
     * dependence on one would show.
     */
    /**
     * The H2 file of `--h2`, opened before the server listens. The library's database keeps
     * its store private and opens collections from its own constructor, so each backend's
     * database reads it here.
     */
    static MVStore h2;

    static final boolean SPEEDUPS = !"off".equals(System.getenv("MONGO_STANDIN_SPEEDUPS"));

    /** The library's memory collection with the fidelity shims only. */
    static class FaithfulCollection extends MemoryCollection {
        FaithfulCollection(MongoDatabase database, String name, CollectionOptions options, CursorRegistry cursors) {
            super(database, name, options, cursors);
        }

        @Override
        protected void handleUpdate(Integer position, Document oldDocument, Document newDocument) {
            Limits.checkUpdate(this, getIndexes(), position, oldDocument, newDocument, this::updateDataSize);
            super.handleUpdate(position, oldDocument, newDocument);
        }
    }

    static final class FaithfulDatabase extends MemoryDatabase {
        FaithfulDatabase(String name, CursorRegistry cursors) { super(name, cursors); }

        @Override
        protected MemoryCollection openOrCreateCollection(String name, CollectionOptions options) {
            return new FaithfulCollection(this, name, options, cursorRegistry);
        }
    }

    static class FaithfulBackend extends MemoryBackend {
        @Override
        public MemoryDatabase openOrCreateDatabase(String name) {
            return new FaithfulDatabase(name, getCursorRegistry());
        }

        @Override
        public Document handleCommand(Channel channel, String database, String command, Document query) {
            return strictly(channel, command, query, (c, q) -> super.handleCommand(channel, database, c, q));
        }
    }

    /** The library's H2 collection with the fidelity shims only. */
    static class FaithfulH2Collection extends H2Collection {
        FaithfulH2Collection(MongoDatabase database, String name, CollectionOptions options,
                             MVMap<Object, Document> data, MVMap<String, Object> meta, CursorRegistry cursors) {
            super(database, name, options, data, meta, cursors);
        }

        @Override
        protected void handleUpdate(Object position, Document oldDocument, Document newDocument) {
            Limits.checkUpdate(this, getIndexes(), position, oldDocument, newDocument, this::updateDataSize);
            super.handleUpdate(position, oldDocument, newDocument);
        }
    }

    static final class FaithfulH2Database extends H2Database {
        FaithfulH2Database(String name, CursorRegistry cursors) { super(name, h2, cursors); }

        @Override
        protected MongoCollection<Object> openOrCreateCollection(String name, CollectionOptions options) {
            String fullName = getFullCollectionNamespace(name);
            MVMap<Object, Document> data = h2.openMap("databases." + fullName);
            MVMap<String, Object> meta = h2.openMap("meta." + fullName);
            return new FaithfulH2Collection(this, name, options, data, meta, cursorRegistry);
        }
    }

    static class FaithfulH2Backend extends H2Backend {
        FaithfulH2Backend(MVStore store) { super(store); }

        @Override
        protected MongoDatabase openOrCreateDatabase(String name) {
            return new FaithfulH2Database(name, getCursorRegistry());
        }

        @Override
        public Document handleCommand(Channel channel, String database, String command, Document query) {
            return strictly(channel, command, query, (c, q) -> super.handleCommand(channel, database, c, q));
        }
    }

    /** A backend's own handling of commands (the library's), for one connection and database. */
    interface Commands {
        Document run(String command, Document query);
    }

    /** A command as MongoDB answers it: the failpoint first, then index conflicts, then the library. */
    static Document strictly(Channel channel, String command, Document query, Commands library) {
        if (SLOW_MS < 0) {
            return strictlyUntimed(channel, command, query, library);
        }
        long started = System.nanoTime();
        try {
            return strictlyUntimed(channel, command, query, library);
        } finally {
            long tookMs = (System.nanoTime() - started) / 1_000_000;
            if (tookMs >= SLOW_MS) {
                String text = String.valueOf(query);
                System.err.println("SLOW " + tookMs + " ms " + command + " "
                    + text.substring(0, Math.min(text.length(), 400)));
            }
        }
    }

    /**
     * Commands that took at least this many milliseconds are printed on stderr ("SLOW ..."),
     * when `MONGO_STANDIN_SLOW_MS` is set: a way to find what holds the stand-in under load.
     */
    static final long SLOW_MS = Long.parseLong(System.getenv().getOrDefault("MONGO_STANDIN_SLOW_MS", "-1"));

    static Document strictlyUntimed(Channel channel, String command, Document query, Commands library) {
        if (command.equals("dropDatabase")) {
            Document reply = FailPoint.handle(channel, command, query, () -> library.run(command, query));
            // MongoDB frees a dropped database's files at once; the memory backend's documents
            // would stay in the JVM's heap until a collection of its old generation, which on a
            // heap of gigabytes (the bench's searches leave one) runs concurrently for seconds,
            // taking a core from whatever is measured next. Freed here, at the drop.
            System.gc();
            return reply;
        }
        return FailPoint.handle(channel, command, query, () -> {
            if (command.equals("hello")) {
                // mongod (4.4.2 and later) answers `hello` as a command too, not only in the
                // handshake; the library knows it only as `isMaster`.
                return library.run("isMaster", new Document("isMaster", 1));
            }
            if (!command.equals("createIndexes")) {
                return library.run(command, query);
            }
            Function<String, List<?>> existing =
                collection -> firstBatch(library.run("listIndexes", new Document("listIndexes", collection)));
            return IndexConflicts.check(query, existing, () -> library.run(command, query));
        });
    }

    /** The documents of a command's cursor reply (`cursor.firstBatch`), or null. */
    static List<?> firstBatch(Document reply) {
        if (reply != null && reply.get("cursor") instanceof Document cursor && cursor.get("firstBatch") instanceof List<?> batch) {
            return batch;
        }
        return null;
    }

    /** One line on stdout, at once: what the stand-in is doing while it starts. */
    static void progress(String what) {
        System.out.println("PROGRESS " + what);
        System.out.flush();
    }

    /**
     * Opens the H2 file, compacting it first when live data fills less than half of its chunks
     * (a file only grows; removed data leaves space that the next writes reuse, or this
     * reclaims), by rewriting it whole (MVStoreTool.compact).
     */
    static MVStore openH2(String file) {
        java.io.File f = new java.io.File(file);
        System.out.println("OPENING " + file + " " + f.length());
        System.out.flush();
        MVStore store = openFile(file);
        int live = store.getFileStore().getChunksFillRate();
        progress("file of " + f.length() + " bytes, " + live + "% of it live data");
        if (f.length() > 64L * 1024 * 1024 && live < 50) {
            progress("compacting " + file);
            store.close();
            org.h2.mvstore.MVStoreTool.compact(file, false);
            progress("compacted to " + f.length() + " bytes");
            store = openFile(file);
        }
        return store;
    }

    /**
     * The H2 file opened with a page cache of H2_CACHE_MB (H2's default is 16 MB). A page
     * holds many documents and is decoded whole on a miss: with a day's 20 KB predictions the
     * default cache missed on nearly every look-up of a document by `_id`, and each one decoded
     * a page of documents (measured: 2 ms per document found by a sweep's page of 100).
     */
    static MVStore openFile(String file) {
        return new MVStore.Builder().fileName(file).cacheSize(H2_CACHE_MB).open();
    }

    static final int H2_CACHE_MB = 128;

    /**
     * The wire-protocol server: the library's own handlers, on event loops handed out so that
     * each connection has one of its own (`LOOPS` of them; past that many connections, the
     * least busy is shared), which runs its commands as mongod's thread per connection does.
     * The library's `MongoServer` deals its connections in turn over a few loops (twice the
     * cores), so one slow command (a scan of a large collection, seconds on the library's
     * collections) held every other connection of its loop, and a connection opened meanwhile
     * could not even say hello: in the fault suite, a restarted runner whose new connection
     * landed on the loop of a neighbouring row's scans of file chunks (0.7-1.5 s each) wrote
     * nothing for 6 to 9 s. A loop's thread starts with its first connection.
     */
    static final class Server {
        /** Event loops at most: connections at once, each with a loop of its own. */
        static final int LOOPS = 128;

        final MongoBackend backend;
        final EventLoopGroup acceptor = new MultiThreadIoEventLoopGroup(1, new DefaultThreadFactory("mongo-server-accept"),
            NioIoHandler.newFactory());
        /** The connections of each loop, by the loop's index in `loops`. */
        final AtomicIntegerArray connections = new AtomicIntegerArray(LOOPS);
        final Map<EventExecutor, Integer> loops = new ConcurrentHashMap<>();
        final EventLoopGroup io = new MultiThreadIoEventLoopGroup(LOOPS,
            new ThreadPerTaskExecutor(new DefaultThreadFactory("mongo-connection")), this::leastBusy, NioIoHandler.newFactory());
        final ChannelGroup clients = new DefaultChannelGroup("mongodb-channels", GlobalEventExecutor.INSTANCE);
        Channel listening;

        Server(MongoBackend backend) { this.backend = backend; }

        /** Hands each new connection the loop with the fewest connections (the first such). */
        EventExecutorChooserFactory.EventExecutorChooser leastBusy(EventExecutor[] executors) {
            for (int i = 0; i < executors.length; i++) {
                loops.put(executors[i], i);
            }
            return () -> {
                synchronized (connections) {
                    int best = 0;
                    for (int i = 1; i < executors.length; i++) {
                        if (connections.get(i) < connections.get(best)) {
                            best = i;
                        }
                    }
                    connections.incrementAndGet(best);
                    return executors[best];
                }
            };
        }

        /** Listens on host:port (0: a free port); returns the address bound. */
        InetSocketAddress bind(String host, int port) {
            ServerBootstrap bootstrap = new ServerBootstrap()
                .group(acceptor, io)
                .channel(NioServerSocketChannel.class)
                .option(ChannelOption.SO_BACKLOG, 100)
                .childOption(ChannelOption.TCP_NODELAY, true)
                .childHandler(new ChannelInitializer<SocketChannel>() {
                    @Override
                    protected void initChannel(SocketChannel channel) {
                        // Registered on a loop of `io`, which `leastBusy` counted.
                        int loop = loops.get(channel.eventLoop());
                        channel.closeFuture().addListener(closed -> connections.decrementAndGet(loop));
                        channel.pipeline().addLast(new MongoWireReplyEncoder());
                        channel.pipeline().addLast(new MongoWireMessageEncoder());
                        channel.pipeline().addLast(new MongoWireProtocolHandler());
                        channel.pipeline().addLast(new MongoDatabaseHandler(backend, clients));
                        channel.pipeline().addLast(new MongoExceptionHandler());
                    }
                });
            listening = bootstrap.bind(host, port).syncUninterruptibly().channel();
            return (InetSocketAddress) listening.localAddress();
        }

        /** Stops listening, closes every connection, then the backend (as the library's does). */
        void shutdown() {
            listening.close().syncUninterruptibly();
            clients.close().syncUninterruptibly();
            acceptor.shutdownGracefully(0, 5, TimeUnit.SECONDS).syncUninterruptibly();
            io.shutdownGracefully(0, 5, TimeUnit.SECONDS).syncUninterruptibly();
            backend.close();
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
            backend = SPEEDUPS ? new Speedups.IdIndexedBackend() : new FaithfulBackend();
        } else {
            h2 = openH2(h2File);
            backend = SPEEDUPS ? new Speedups.IdIndexedH2Backend(h2)
                : new FaithfulH2Backend(h2);
        }
        if (!SPEEDUPS) {
            progress("speed-ups off (MONGO_STANDIN_SPEEDUPS=off): the library's own collections");
        }
        backend.version(new Mongo60());
        Server server = new Server(backend);
        InetSocketAddress addr = server.bind(host, port);
        MVStore file = h2;
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            server.shutdown();
            if (file != null && !file.isClosed()) {
                file.close(10_000); // compacts for up to 10 s
            }
        }));

        System.out.println("LISTENING mongodb://" + host + ":" + addr.getPort());
        System.out.flush();

        if (exitOnEof) {
            while (System.in.read() != -1) { /* discard */ }
            System.exit(0);
        }
        Thread.currentThread().join();
    }
}
