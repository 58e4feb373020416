//! Activity records laid out byte by byte from the documented offsets: how the tests
//! (and the fuzz seeds) make the buffers libcupti would hand over, without a GPU.

/// A zeroed record of `size` bytes with little-endian values placed at offsets.
pub struct Layout(pub Vec<u8>);

impl Layout {
    pub fn new(size: usize, kind: u32) -> Layout {
        Layout(vec![0; size]).u32(0, kind)
    }
    pub fn put(mut self, at: usize, bytes: &[u8]) -> Layout {
        self.0[at..at + bytes.len()].copy_from_slice(bytes);
        self
    }
    pub fn u8(self, at: usize, v: u8) -> Layout {
        self.put(at, &[v])
    }
    pub fn u16(self, at: usize, v: u16) -> Layout {
        self.put(at, &v.to_le_bytes())
    }
    pub fn u32(self, at: usize, v: u32) -> Layout {
        self.put(at, &v.to_le_bytes())
    }
    pub fn i32(self, at: usize, v: i32) -> Layout {
        self.put(at, &v.to_le_bytes())
    }
    pub fn u64(self, at: usize, v: u64) -> Layout {
        self.put(at, &v.to_le_bytes())
    }
}
