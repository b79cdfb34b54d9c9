// Decompresses or compresses stdin to stdout with the Java libraries Kafka's
// Java client uses (xerial snappy-java, lz4-java, zstd-jni, java.util.zip).
// Usage: java CodecCheck (decode|encode) (gzip|snappy|lz4|zstd)
import java.io.*;
import java.util.zip.GZIPInputStream;
import java.util.zip.GZIPOutputStream;

public class CodecCheck {
    public static void main(String[] args) throws Exception {
        boolean decode = args[0].equals("decode");
        String codec = args[1];
        InputStream in = new BufferedInputStream(System.in);
        OutputStream out = new BufferedOutputStream(System.out);
        if (decode) {
            InputStream dec;
            switch (codec) {
                case "gzip": dec = new GZIPInputStream(in); break;
                case "snappy": dec = new org.xerial.snappy.SnappyInputStream(in); break;
                case "lz4": dec = new net.jpountz.lz4.LZ4FrameInputStream(in); break;
                case "zstd": dec = new com.github.luben.zstd.ZstdInputStreamNoFinalizer(in); break;
                default: throw new IllegalArgumentException(codec);
            }
            dec.transferTo(out);
        } else {
            OutputStream enc;
            switch (codec) {
                case "gzip": enc = new GZIPOutputStream(out); break;
                case "snappy": enc = new org.xerial.snappy.SnappyOutputStream(out); break;
                case "lz4": enc = new net.jpountz.lz4.LZ4FrameOutputStream(out); break;
                case "zstd": enc = new com.github.luben.zstd.ZstdOutputStreamNoFinalizer(out); break;
                default: throw new IllegalArgumentException(codec);
            }
            in.transferTo(enc);
            enc.close();
        }
        out.flush();
    }
}
