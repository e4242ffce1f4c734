pub fn chunks(n: usize, size: usize) -> usize {
    n.div_ceil(size)
}
